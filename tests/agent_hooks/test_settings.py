"""``[memory.hooks]``: validated with the rest of the configuration, every mistake naming its
key, and shown by ``config check`` with its defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scopemem.agent_hooks.runner import state_dir, user_id
from scopemem.config import HooksConfig, config_from_mapping
from scopemem.errors import ConfigError
from tests.agent_hooks.claude_code import REPO_ROOT


def hooks(**table: Any) -> HooksConfig:
    return config_from_mapping({"memory": {"hooks": table}}).hooks


def test_defaults() -> None:
    assert hooks() == HooksConfig(platform="claude-code", subject=None, timeout=3.0,
                                  visibility="dm", state_dir=None)


@pytest.mark.parametrize(("table", "key"), [
    ({"timeout": 0}, "memory.hooks.timeout"),
    ({"timeout": 61}, "memory.hooks.timeout"),
    ({"timeout": "3"}, "memory.hooks.timeout"),
    ({"timeout": True}, "memory.hooks.timeout"),
    ({"visibility": "everyone"}, "memory.hooks.visibility"),
    ({"platform": "claude:code"}, "memory.hooks.platform"),
    ({"platform": ""}, "memory.hooks.platform"),
    ({"platform": "user"}, "memory.hooks.platform: must not be 'user'"),
    ({"subject": "alice smith"}, "memory.hooks.subject"),
    ({"subject": "a\u200bb"}, "memory.hooks.subject"),
    ({"subject": 7}, "memory.hooks.subject"),
    # Each was accepted and left the sessions without the person's scope (a warning in
    # hooks.log only), or in user:claude-code:user:claude-code:alice, which nothing reads.
    ({"subject": ""}, "memory.hooks.subject: must not be empty"),
    ({"subject": "alice:"}, "memory.hooks.subject: must not end with a colon"),
    ({"subject": "user:claude-code:alice"},
     'memory.hooks.subject: takes the name, not the user scope\'s key: subject = "alice"'),
    ({"state_dir": " "}, "memory.hooks.state_dir"),
    ({"sujbect": "alice"}, "memory.hooks: unknown key(s): sujbect"),
])
def test_mistakes_name_the_key(table: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace("(", r"\(").replace(")", r"\)")):
        hooks(**table)


def test_not_a_table() -> None:
    with pytest.raises(ConfigError, match="memory.hooks must be a table"):
        config_from_mapping({"memory": {"hooks": 3}})


def test_the_person_comes_from_the_config() -> None:
    config = config_from_mapping({"memory": {"hooks": {"subject": "alice"}}})
    assert user_id(config) == "claude-code:alice"
    mine = config_from_mapping({"memory": {"hooks": {"platform": "cc"}}})
    assert (user_id(mine) or "").startswith("cc:")


def test_state_dir_defaults_to_the_xdg_state_home(tmp_path: Path) -> None:
    config = config_from_mapping({})
    assert state_dir(config, {"XDG_STATE_HOME": str(tmp_path)}) == \
        tmp_path / "scopemem" / "hooks"
    assert state_dir(config, {}) == Path.home() / ".local" / "state" / "scopemem" / "hooks"
    named = config_from_mapping({"memory": {"hooks": {"state_dir": str(tmp_path / "s")}}})
    assert state_dir(named, {}) == tmp_path / "s"


def test_a_relative_xdg_state_home_is_ignored() -> None:
    """The XDG spec calls a relative path invalid: taken as it is, the hooks' ledger and log
    would land in whatever project folder the agent runs the hook in."""
    config = config_from_mapping({})
    assert state_dir(config, {"XDG_STATE_HOME": "state"}) == \
        Path.home() / ".local" / "state" / "scopemem" / "hooks"


def test_config_check_shows_the_table_with_its_defaults(tmp_path: Path) -> None:
    path = tmp_path / "scopemem.toml"
    path.write_text('[memory]\n[memory.hooks]\nsubject = "alice"\n')
    done = subprocess.run([sys.executable, "-m", "scopemem", "--config", str(path), "config",
                           "check"], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    table = done.stdout.split("[memory.hooks]\n", 1)[1]
    assert 'subject = "alice"' in table and "timeout = 3.0" in table
    assert 'visibility = "dm"' in table
