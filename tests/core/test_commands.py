from __future__ import annotations

import pytest

from scopemem.core.commands import (
    CommandUsageError,
    ForgetCommand,
    ListCommand,
    ListScope,
    SweepCommand,
    forget_refusal,
    parse_memory_command,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("memory list", ListCommand()),
    ("Memory LIST", ListCommand()),
    ("memory list org", ListCommand(scope=ListScope.ORG)),
    ("memory list org deploy steps", ListCommand(scope=ListScope.ORG, query="deploy steps")),
    ("memory list me", ListCommand(scope=ListScope.ME)),
    ("memory list deploy org", ListCommand(query="deploy org")),
    ("memory list --scope org me deploy", ListCommand(scope=ListScope.ORG, query="me deploy")),
    ("memory list --scope=channel", ListCommand(scope=ListScope.CHANNEL)),
    ("memory list deploy --limit 5", ListCommand(limit=5, query="deploy")),
    ("memory list --limit=50 repo", ListCommand(scope=ListScope.REPO, limit=50)),
    ("memory list repo --repo acme/api", ListCommand(scope=ListScope.REPO, repo="acme/api")),
    ("memory forget mem:org:acme:3", ForgetCommand("mem:org:acme:3")),
    ("memory sweep --scope org", SweepCommand(scope=ListScope.ORG)),
    ("memory sweep --dry-run --scope=all", SweepCommand(scope=ListScope.ALL, dry_run=True)),
    ("memory sweep --scope repo --repo acme/api",
     SweepCommand(scope=ListScope.REPO, repo="acme/api")),
])
def test_commands_parse(text, expected):
    assert parse_memory_command(text) == expected


@pytest.mark.parametrize("text", ["", "hello", "remember this", "memory is flaky today",
                                  "memories list"])
def test_prose_is_not_a_command(text):
    assert parse_memory_command(text) is None


@pytest.mark.parametrize(("text", "problem"), [
    ("memory", "needs a verb"),
    ("memory lsit", "unknown memory verb"),
    ("memory list --limit 0", "--limit"),
    ("memory list --limit 51", "--limit"),
    ("memory list --limit 2.5", "--limit"),
    ("memory list --limit five", "--limit"),
    ("memory list --limit", "needs a value"),
    ("memory list --limit --scope org", "needs a value"),
    ("memory list --scope everyone", "--scope"),
    ("memory list --limit 3 --limit 4", "twice"),
    ("memory list --verbose", "unknown option --verbose"),
    ("memory forget", "needs a record id"),
    ("memory forget a b", "exactly one"),
    ("memory sweep", "needs --scope"),
    ("memory sweep --scope me", "--scope"),
    ("memory sweep --scope org extra", "unexpected words"),
])
def test_malformed_commands_are_usage_errors(text, problem):
    with pytest.raises(CommandUsageError, match=problem) as info:
        parse_memory_command(text)
    assert "Usage: memory" in str(info.value)


CALLER = "user:slack:U1"


def test_the_scope_gate():
    assert forget_refusal(CALLER, CALLER, is_admin=False) is None
    assert "admins" in forget_refusal("org:acme", CALLER, is_admin=False)
    assert forget_refusal("org:acme", CALLER, is_admin=True) is None
    assert forget_refusal("repo:o/n", CALLER, is_admin=True) is None
    assert forget_refusal("channel:slack:C1", CALLER, is_admin=False) is not None
    assert forget_refusal("guild:discord:9", CALLER, is_admin=False) is not None
    for admin in (False, True):
        assert "another person" in forget_refusal("user:slack:U2", CALLER, is_admin=admin)
