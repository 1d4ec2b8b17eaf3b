"""The built-in narrowing policy, through the host (so the widening check applies too)."""

from __future__ import annotations

import pytest

from scopemem.core.policy import RunActor, WriteDecision
from scopemem.core.records import Candidate, Kind
from scopemem.plugins import host
from scopemem.plugins.manager import new_plugin_manager

BREADTH = {"org": 0, "repo": 10, "channel": 20, "user": 30}
ORG, REPO, CHANNEL, USER = "org:acme", "repo:o/n", "channel:slack:C1", "user:slack:U1"
FACT = Candidate(kind=Kind.FACT, text="use the vpn", source_thread_key="t")


def decide(target: str, origin: str | None, scopes: dict[str, str]) -> WriteDecision:
    pm = new_plugin_manager(load_entry_points=False)
    return host.authorize_write(pm, actor=RunActor(scopes), target=target, candidate=FACT,
                                origin=origin, breadth=BREADTH)


ALL = {"org": ORG, "repo": REPO, "channel": CHANNEL, "user": USER}


@pytest.mark.parametrize("origin", ["public", "machine", "PUBLIC"])
def test_public_and_machine_origins_keep_the_org_routing(origin):
    assert decide(ORG, origin, ALL) == WriteDecision.allow(ORG)


def test_dm_narrows_org_to_the_user_else_the_channel():
    assert decide(ORG, "dm", ALL) == WriteDecision.narrow(USER, "dm_origin")
    no_user = {k: v for k, v in ALL.items() if k != "user"}
    assert decide(ORG, "dm", no_user) == WriteDecision.narrow(CHANNEL, "dm_origin")


@pytest.mark.parametrize(("origin", "reason"), [
    ("private", "private_origin"), (None, "unknown_origin"), ("guild-secret", "unknown_origin")])
def test_private_and_unknown_narrow_org_to_the_channel_else_the_user(origin, reason):
    assert decide(ORG, origin, ALL) == WriteDecision.narrow(CHANNEL, reason)
    no_channel = {k: v for k, v in ALL.items() if k != "channel"}
    assert decide(ORG, origin, no_channel) == WriteDecision.narrow(USER, reason)


def test_never_narrowed_to_repo_and_never_dropped_silently():
    only_repo = {"org": ORG, "repo": REPO}
    decision = decide(ORG, "dm", only_repo)
    assert decision.scope_key is None and decision.reason == "dm_origin_no_scope"


@pytest.mark.parametrize("target", [USER, CHANNEL, REPO])
@pytest.mark.parametrize("origin", ["dm", "private", None, "public"])
def test_user_channel_and_repo_writes_are_never_moved(target, origin):
    assert decide(target, origin, ALL) == WriteDecision.allow(target)


GUILD = "guild:discord:G1"


@pytest.mark.parametrize(("origin", "narrowed", "reason"), [
    ("dm", USER, "dm_origin"), ("private", CHANNEL, "private_origin"),
    (None, CHANNEL, "unknown_origin")])
def test_a_plugin_kinds_scope_is_everyones_so_closed_origins_narrow_it_as_org(
        origin, narrowed, reason):
    # A guild scope is read by everyone in the installation (core.policy.audience_of): a
    # fact from a DM or a private channel routed there would reach people it was never
    # said to.
    scopes = {**ALL, "guild": GUILD}
    breadth = {**BREADTH, "guild": 5}
    pm = new_plugin_manager(load_entry_points=False)
    decision = host.authorize_write(pm, actor=RunActor(scopes), target=GUILD, candidate=FACT,
                                    origin=origin, breadth=breadth)
    assert decision == WriteDecision.narrow(narrowed, reason)
    assert host.authorize_write(pm, actor=RunActor(scopes), target=GUILD, candidate=FACT,
                                origin="public", breadth=breadth) == WriteDecision.allow(GUILD)
