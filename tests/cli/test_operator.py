"""The command line is the operator's tool: it acts as the local person (``user:cli:local``,
in no channel), and acting for someone else or on a scope that is not theirs takes
``--operator``. Without it that is a usage error naming the flag, and nothing is read or
changed. Through click's CliRunner on real SQLite data directories."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from scopemem.api.memory import Memory
from scopemem.core.records import Candidate, Kind
from tests.cli.test_porting import ADMIN, ok, run, sqlite_config

BOB, HR = "user:slack:UB", "channel:slack:CHR"
BOB_NOTE = "bob keeps his deploy checklist in the wiki"
HR_NOTE = "the salary review for the api team is due in march"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A store holding a record of Bob's, one of #hr's and one of the org's, written by the
    store itself (below every gate)."""
    path = sqlite_config(tmp_path, "data")

    async def plant() -> None:
        memory = Memory.from_config(path)
        try:
            for key, text in ((BOB, BOB_NOTE), (HR, HR_NOTE),
                              ("org:acme", "deploys freeze on fridays")):
                await memory.store.write(key, [Candidate(kind=Kind.FACT, text=text,
                                                         source_thread_key="t")])
        finally:
            await memory.close()

    asyncio.run(plant())
    return path


def refused(config: Path, *args: str) -> str:
    result = run(config, *args)
    assert result.exit_code == 2, result.output
    assert "--operator" in result.output and "Traceback" not in result.output
    assert BOB_NOTE not in result.output and HR_NOTE not in result.output
    return result.output


def exported(config: Path, *args: str) -> list[str]:
    out = ok(run(config, "export", *args)).stdout_bytes.decode()
    return [json.loads(line)["text"] for line in out.splitlines()]


def test_acting_for_another_person_or_from_a_channel_takes_operator(config: Path):
    assert "acts for another person" in refused(config, "forget", f"mem:{BOB}:1", "--as", BOB)
    refused(config, "list", "me", "--as", BOB)
    refused(config, "remember", "--scope", "org", "a plain fact", "--as", "user:slack:U0")
    refused(config, "sweep", "--scope", "org", "--as", "user:slack:U0")
    assert "acts from a channel" in refused(config, "list", "channel", "--channel",
                                            "slack:CHR")
    refused(config, "forget", f"mem:{HR}:1", "--channel", "slack:CHR")
    refused(config, "context", "salary review deploy checklist", "--user", "slack:UB")
    refused(config, "context", "salary review deploy checklist", "--channel", "slack:CHR")
    # Nothing was forgotten; as the operator, the same commands work.
    listed = json.loads(ok(run(config, "list", "me", "--as", BOB, "--operator",
                               "--json")).output)
    assert [r["text"] for r in listed["scopes"][0]["records"]] == [BOB_NOTE]
    assert HR_NOTE in ok(run(config, "context", "salary review", "--channel", "slack:CHR",
                             "--operator")).output
    # The local person is no one else: --as themselves and --user cli:local need nothing.
    ok(run(config, "list", "me", "--as", ADMIN))
    ok(run(config, "context", "deploys", "--user", "cli:local"))


def test_a_user_or_channel_id_that_makes_no_scope_is_a_usage_error(config: Path):
    # A scope key given for the id would read user:user:slack:UB, a scope nobody has, and
    # answer "nothing matched"; an id with a space would make no scope at all.
    for args, hint in (
            (("context", "deploy checklist", "--user", BOB), "--user slack:UB"),
            (("context", "salary review", "--channel", HR), "--channel slack:CHR"),
            (("list", "channel", "--channel", HR), "--channel slack:CHR"),
            (("forget", f"mem:{HR}:1", "--channel", HR), "--channel slack:CHR"),
            (("context", "deploy checklist", "--user", "slack:U B"), "whitespace"),
            (("list", "channel", "--channel", "slack:C R"), "whitespace"),
            (("context", "deploy checklist", "--user", ""), "must not be empty")):
        result = run(config, *args, "--operator")
        assert result.exit_code == 2, (args, result.output)
        assert hint in result.output and "Traceback" not in result.output
        assert BOB_NOTE not in result.output and HR_NOTE not in result.output
    assert exported(config, "--scope", HR, "--operator") == [HR_NOTE]  # nothing forgotten


def test_a_scope_word_where_a_scope_key_goes_is_a_usage_error(config: Path):
    # `export --scope org` read the scope "org", which nobody has: with --operator it said
    # "exported 0 records"; delete-scope deleted nothing and stats counted nothing.
    for args in (("export", "--scope", "org", "--operator"),
                 ("export", "--scope", "me"),
                 ("delete-scope", "me", "--yes"),
                 ("delete-scope", "org", "--yes", "--operator"),
                 ("stats", "--scope", "org")):
        result = run(config, *args)
        assert result.exit_code == 2, (args, result.output)
        assert "is not a scope key: a key is <kind>:<id>" in result.output, result.output
        assert "Traceback" not in result.output
    assert exported(config, "--scope", "org:acme") == ["deploys freeze on fridays"]


def test_a_channel_scope_is_changed_only_from_that_channel(config: Path):
    # The local person is an admin, but in no channel: #hr's record is out of reach.
    closed = run(config, "forget", f"mem:{HR}:1")
    assert closed.exit_code == 1 and "another channel" in closed.output
    assert exported(config, "--scope", HR, "--operator") == [HR_NOTE]
    ok(run(config, "forget", f"mem:{HR}:1", "--channel", "slack:CHR", "--operator"))
    assert "no active records" in ok(run(config, "list", "channel", "--channel", "slack:CHR",
                                         "--operator")).output


def test_export_of_a_scope_that_is_not_the_local_persons_takes_operator(config: Path):
    for key in (BOB, HR):
        assert "user:cli:local may not read" in refused(config, "export", "--scope", key)
    assert "--all exports every" in refused(config, "export", "--all")
    assert exported(config, "--scope", "org:acme") == ["deploys freeze on fridays"]
    assert exported(config, "--scope", BOB, "--operator") == [BOB_NOTE]
    assert set(exported(config, "--all", "--operator")) == {
        BOB_NOTE, HR_NOTE, "deploys freeze on fridays"}


def test_delete_scope_of_another_scope_takes_operator(config: Path):
    for key in (BOB, HR, "org:acme"):
        assert "is not user:cli:local's own scope" in refused(
            config, "delete-scope", key, "--yes")
    assert exported(config, "--scope", BOB, "--operator") == [BOB_NOTE]
    ok(run(config, "remember", "--scope", "me", "I review on mondays"))
    done = ok(run(config, "delete-scope", ADMIN, "--yes", "--json"))  # one's own: no flag
    assert json.loads(done.output)["deleted"] == 1
    gone = ok(run(config, "delete-scope", BOB, "--yes", "--operator", "--json"))
    assert json.loads(gone.output)["deleted"] == 1
    assert exported(config, "--scope", BOB, "--operator") == []
