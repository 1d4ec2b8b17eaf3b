from __future__ import annotations

import pytest

from scopemem.core.commands import (
    CommandUsageError,
    ForgetCommand,
    ListCommand,
    ListScope,
    RememberCommand,
    SweepCommand,
    change_refusal,
    parse_memory_command,
    read_refusal,
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
    ("memory remember use --no-cache when building",
     RememberCommand(text="use --no-cache when building")),
    ("memory remember --scope org --supersedes mem:org:acme:3 lint before pushing",
     RememberCommand(text="lint before pushing", scope="org", supersedes="mem:org:acme:3")),
    ("memory remember --scope=repo --repo acme/api make bootstrap first",
     RememberCommand(text="make bootstrap first", scope="repo", repo="acme/api")),
])
def test_commands_parse(text, expected):
    assert parse_memory_command(text) == expected


KINDS = ("org", "repo", "channel", "user", "guild")


@pytest.mark.parametrize(("text", "expected"), [
    ("memory list guild", ListCommand(scope="guild")),
    ("memory list --scope guild deploy", ListCommand(scope="guild", query="deploy")),
    ("memory sweep --scope guild", SweepCommand(scope="guild")),
    ("memory remember --scope guild raids start at nine", RememberCommand(
        text="raids start at nine", scope="guild")),
])
def test_a_registered_plugin_kind_is_a_scope_word(text, expected):
    assert parse_memory_command(text, KINDS) == expected
    # Without the plugin the word is plain text, or a usage error where a scope is required.
    if isinstance(expected, ListCommand) and "--scope" not in text:
        assert parse_memory_command(text).scope == "all"
    else:
        with pytest.raises(CommandUsageError, match="--scope"):
            parse_memory_command(text)


def test_user_is_never_a_scope_word():
    with pytest.raises(CommandUsageError, match="--scope"):
        parse_memory_command("memory list --scope user", KINDS)
    assert parse_memory_command("memory list user", KINDS) == ListCommand(query="user")


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
    ("memory remember", "needs the text"),
    ("memory remember --scope org", "needs a value|needs the text"),
    ("memory remember --scope all lint first", "--scope"),
    ("memory remember --scope", "needs a value"),
])
def test_malformed_commands_are_usage_errors(text, problem):
    with pytest.raises(CommandUsageError, match=problem) as info:
        parse_memory_command(text)
    assert "Usage: memory" in str(info.value)


CALLER = "user:slack:U1"
ORG_KEY = "org:acme"


ORIGIN = "channel:slack:C1"  # the channel the caller's request comes from


def test_the_scope_gate_for_changes():
    def refusal(key, admin):
        return change_refusal(key, CALLER, admin, ORG_KEY, KINDS, ORIGIN)

    assert refusal(CALLER, False) is None
    assert "admins" in refusal(ORG_KEY, False)
    assert refusal(ORG_KEY, True) is None
    assert refusal("repo:o/n", True) is None
    assert "admins" in refusal(ORIGIN, False)
    assert refusal(ORIGIN, True) is None
    assert refusal("guild:discord:9", True) is None  # a registered plugin kind is shared
    assert "admins" in refusal("guild:discord:9", False)
    for admin in (False, True):
        assert "another person" in refusal("user:slack:U2", admin)
        assert "another channel" in refusal("channel:slack:CHR", admin)
        assert "another organisation" in refusal("org:other", admin)
        assert "no scope kind 'team'" in refusal("team:x", admin)


def test_the_scope_gate_for_reads():
    for key in (CALLER, ORG_KEY, "repo:o/n", ORIGIN, "guild:discord:9"):
        assert read_refusal(key, CALLER, ORG_KEY, KINDS, ORIGIN) is None
    for key in ("user:slack:U2", "channel:slack:CHR", "org:other", "team:x"):
        assert read_refusal(key, CALLER, ORG_KEY, KINDS, ORIGIN) is not None
    # A channel scope is its own channel's audience only: from no channel, none is open.
    assert "another channel" in read_refusal(ORIGIN, CALLER, ORG_KEY, KINDS)
