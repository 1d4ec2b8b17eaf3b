"""The built-in installation commands: plugins, stores, config check."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner

from scopemem.api.memory import Memory
from scopemem.cli import build_cli
from scopemem.config import load_config
from scopemem.errors import ConfigError
from scopemem.plugins.manager import new_plugin_manager


def run(*args: str, env: dict[str, str] | None = None):
    cli = build_cli(new_plugin_manager(environ={}))
    return CliRunner().invoke(cli, list(args), env=env)


def test_stores_lists_the_builtin_stores():
    result = run("stores", "--json")
    assert result.exit_code == 0
    assert {"memory", "null"} <= set(json.loads(result.output))


def test_plugins_lists_builtins_and_entry_points():
    result = run("plugins", "--json")
    assert result.exit_code == 0
    names = {row["name"] for row in json.loads(result.output)}
    assert {"scopemem.plugins.builtin_gate", "memory", "null"} <= names
    human = run("plugins")
    assert "scopemem.plugins.builtin_scopes: scopemem_scope_kinds" in human.output


def test_config_check_prints_effective_settings(tmp_path: Path):
    path = tmp_path / "scopemem.toml"
    path.write_text('[memory]\nenabled = true\norganization = "acme"\nstore = "memory"\n')
    result = run("--config", str(path), "config", "check", "--json")
    assert result.exit_code == 0, result.output
    settings = json.loads(result.output)["memory"]
    assert settings["organization"] == "acme" and settings["limit"] == 32
    assert settings["stores"] == {"memory": {}}


def test_config_check_says_which_file_it_read_or_that_there_was_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SCOPEMEM_CONFIG", raising=False)
    # No file anywhere: the defaults, said so (never "configuration is valid").
    none = run("config", "check")
    assert none.exit_code == 0, none.output
    header = none.output.splitlines()[0]
    assert header.startswith("# no configuration file") and "valid" not in header
    assert tomllib.loads(none.output)["memory"]["enabled"] is False
    (tmp_path / "scopemem.toml").write_text('[memory]\nenabled = true\norganization = "a"\n')
    found = run("config", "check")
    assert found.output.startswith("# scopemem.toml: the configuration is valid")
    named = run("--config", str(tmp_path / "scopemem.toml"), "config", "check")
    assert named.output.startswith(f"# {tmp_path / 'scopemem.toml'}: the configuration")
    assert tomllib.loads(named.output)["memory"]["organization"] == "a"


def test_a_malformed_config_file_is_one_line(tmp_path: Path):
    from tests.test_config import malformed_files

    for message, path in malformed_files(tmp_path).items():
        result = subprocess.run([sys.executable, "-m", "scopemem", "--config", str(path),
                                 "config", "check"], capture_output=True, text=True,
                                timeout=60, check=False)
        [line] = result.stderr.splitlines()
        assert result.returncode == 1 and line.startswith(f"Error: {path}: {message}")


@pytest.mark.parametrize("args", [["config", "check", "--config", "x.toml"],
                                  ["health", "--config=x.toml"]])
def test_config_after_the_command_says_it_goes_before_it(args: list[str]):
    """``scopemem serve --config FILE`` (a unit file's natural order) was only "No such
    option '--config'", though the option exists one place to the left."""
    result = run(*args)
    assert result.exit_code == 2
    assert "No such option '--config'" in result.output
    assert "scopemem --config FILE " in result.output


def test_config_check_names_the_bad_key_without_a_traceback(tmp_path: Path):
    path = tmp_path / "scopemem.toml"
    path.write_text("[memory]\nlimit = 'many'\n")
    result = run("--config", str(path), "config", "check")
    assert result.exit_code == 1
    assert "memory.limit" in result.output and "Traceback" not in result.output
    missing = run("--config", str(tmp_path / "nope.toml"), "config", "check")
    assert missing.exit_code == 1 and "no such configuration file" in missing.output


@pytest.mark.parametrize("admin", ["cli:local", "slack:U0001", "U0001", "user:", "user:slack:",
                                   "user:slack:U 1"])
def test_an_admin_that_is_no_user_scope_key_is_a_config_error(tmp_path: Path, admin: str):
    # A caller is always a user scope key: such an entry would name nobody, silently.
    path = tmp_path / "scopemem.toml"
    path.write_text('[memory]\nenabled = true\norganization = "acme"\n'
                    f'admins = ["user:slack:U0001", "{admin}"]\n')
    for args in (("config", "check"), ("list", "org")):
        result = run("--config", str(path), *args)
        assert result.exit_code == 1, result.output
        assert f"memory.admins: {admin!r} is not a user scope key" in result.output
        assert "Traceback" not in result.output
    path.write_text('[memory]\nenabled = true\norganization = "acme"\n'
                    'admins = ["user:slack:U0001", "user:cli:local"]\n')
    assert run("--config", str(path), "config", "check").exit_code == 0


@pytest.mark.parametrize(("repo", "hint"), [
    ("https://github.com/acme/api", 'repo = "acme/api"'),
    ("acme/api.git", 'repo = "acme/api"'),
    ("acme", "(e.g. acme/api)")])
def test_an_mcp_repo_no_other_run_reads_is_a_config_error(tmp_path: Path, repo: str,
                                                          hint: str):
    # The MCP server kept its facts in repo:https://github.com/acme/api, apart from the
    # repo:acme/api the team's hooks and bots read.
    path = tmp_path / "scopemem.toml"
    path.write_text('[memory]\nenabled = true\norganization = "acme"\n'
                    f'[memory.mcp]\nrepo = "{repo}"\n')
    result = run("--config", str(path), "config", "check")
    assert result.exit_code == 1, result.output
    assert "memory.mcp.repo: takes owner/name" in result.output and hint in result.output
    assert "Traceback" not in result.output


def test_config_check_refuses_an_uninstalled_store(tmp_path: Path):
    path = tmp_path / "scopemem.toml"
    path.write_text('[memory]\nenabled = true\norganization = "a"\nstore = "cassandra"\n')
    result = run("--config", str(path), "config", "check")
    assert result.exit_code == 1 and "plugin may not be installed" in result.output


def test_the_console_script_is_installed():
    script = Path(sys.executable).with_name("scopemem")
    completed = subprocess.run([str(script), "--help"], capture_output=True, text=True,
                               timeout=60, check=False)
    assert completed.returncode == 0 and "config" in completed.stdout


def test_config_check_validates_the_reflection_provider(tmp_path: Path):
    path = tmp_path / "scopemem.toml"
    path.write_text('[memory]\nmodel = "nosuch/m1"\n')
    result = run("--config", str(path), "config", "check")
    assert result.exit_code == 1 and "memory.model" in result.output
    assert "plugin may not be installed" in result.output
    path.write_text('[memory]\nmodel = "openai/gpt-4o-mini"\n'
                    '[memory.providers.openai]\ntimeout_seconds = -1\n')
    result = run("--config", str(path), "config", "check")
    assert result.exit_code == 1 and "memory.providers.openai.timeout_seconds" in result.output
    path.write_text('[memory]\nmodel = "openai/gpt-4o-mini"\n')
    assert run("--config", str(path), "config", "check").exit_code == 0


# --- issue 12 item 16: config check validates what the commands validate ----------------------


AGREE = {
    "a typo in the store's table": (
        'enabled = true\norganization = "acme"\n[memory.stores.sqlite]\npath = "d"\nbogus = 1\n',
        "memory.stores.sqlite.bogus"),
    "a typo in a table the store does not use": (
        'enabled = true\norganization = "acme"\nstore = "sqlite"\n'
        '[memory.stores.worker]\nbase_url = "ftp://x"\n', "memory.stores.worker.base_url"),
    "a table for a store nobody installed": (
        'enabled = true\norganization = "acme"\n[memory.stores.sqlit]\npath = "d"\n',
        "memory.stores.sqlit"),
    "a provider table reflection would reject": (
        '[memory.providers.anthropic]\ntimeout_seconds = 0\n',
        "memory.providers.anthropic.timeout_seconds"),
    "a bad table while memory is off": (
        'enabled = false\n[memory.stores.sqlite]\nsynchronous = "sometimes"\n',
        "memory.stores.sqlite.synchronous"),
    "an uninstalled store while memory is off": ('store = "nosuch"\n', "memory.store"),
}


@pytest.mark.parametrize("case", list(AGREE))
def test_config_check_and_the_commands_refuse_the_same_tables(tmp_path: Path, case):
    body, key = AGREE[case]
    path = tmp_path / "scopemem.toml"
    path.write_text("[memory]\n" + body)
    checked = run("--config", str(path), "config", "check")
    assert checked.exit_code == 1 and key in checked.output, checked.output
    assert "Traceback" not in checked.output
    listed = run("--config", str(path), "list")
    assert listed.exit_code == 1 and key in listed.output, listed.output
    with pytest.raises(ConfigError, match=re.escape(key)):
        Memory.from_config(path, plugin_manager=new_plugin_manager(environ={}))


def sqlite_config(tmp_path: Path, options: str = "") -> Path:
    path = tmp_path / "scopemem.toml"
    path.write_text('[memory]\nenabled = true\norganization = "acme"\nmodel = "anthropic/m"\n'
                    f'[memory.stores.sqlite]\npath = "{tmp_path / "data"}"\n{options}')
    return path


def test_the_effective_settings_are_toml_with_every_plugins_defaults(tmp_path: Path):
    path = sqlite_config(tmp_path)
    result = run("--config", str(path), "config", "check")
    assert result.exit_code == 0, result.output
    printed = tomllib.loads(result.output)
    assert printed["memory"]["gate"] is True and printed["memory"]["max_tokens"] == 3000
    assert printed["memory"]["stores"]["sqlite"] == {
        "path": str(tmp_path / "data"), "synchronous": "full", "busy_timeout_ms": 5000,
        "cache_rows": 50_000, "usage_flush_ms": 1000, "max_scopes": 0, "layout": "shared"}
    assert printed["memory"]["providers"]["anthropic"]["api_key_env"] == "ANTHROPIC_API_KEY"
    # What it prints is a configuration that loads back as the same one.
    again = tmp_path / "again.toml"
    again.write_text(result.output)
    assert load_config(again) == attrs.evolve(
        load_config(path), stores=printed["memory"]["stores"],
        providers=printed["memory"]["providers"])
    assert tomllib.loads(run("--config", str(again), "config", "check").output) == printed


def test_the_retired_file_layout_setting_leaves_the_shared_layouts_settings_in_effect(
        tmp_path: Path):
    retired = 'layout = "file"\nmax_open_connections = 64\nrank_processes = 2\n'
    result = run("--config", str(sqlite_config(tmp_path, retired)), "config", "check")
    assert result.exit_code == 0, result.output
    printed = tomllib.loads(result.output)
    assert printed["memory"]["stores"]["sqlite"] == {
        "path": str(tmp_path / "data"), "synchronous": "full", "busy_timeout_ms": 5000,
        "cache_rows": 50_000, "usage_flush_ms": 1000, "max_scopes": 0, "layout": "shared"}
