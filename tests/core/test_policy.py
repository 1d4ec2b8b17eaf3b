from __future__ import annotations

from scopemem.core.policy import (
    WIDENING_REFUSED,
    Audience,
    RunActor,
    Visibility,
    WriteDecision,
    audience_of,
    parse_visibility,
    settle_decision,
)

BREADTH = {"org": 0, "repo": 10, "channel": 20, "user": 30}
ACTOR = RunActor({"org": "org:acme", "repo": "repo:o/n", "channel": "channel:slack:C1",
                  "user": "user:slack:U1"})


def test_no_answer_allows_the_routed_target():
    assert settle_decision("org:acme", None, ACTOR, BREADTH) == WriteDecision.allow("org:acme")


def test_narrowing_to_one_of_the_runs_scopes_is_kept():
    decision = WriteDecision.narrow("user:slack:U1", "dm_origin")
    assert settle_decision("org:acme", decision, ACTOR, BREADTH) == decision


def test_denial_is_kept():
    decision = WriteDecision.deny("nope")
    assert settle_decision("org:acme", decision, ACTOR, BREADTH) == decision


def test_widening_is_refused():
    for target, to in [("user:slack:U1", "org:acme"), ("channel:slack:C1", "repo:o/n"),
                       ("user:slack:U1", "channel:slack:C1")]:
        settled = settle_decision(target, WriteDecision.narrow(to, "x"), ACTOR, BREADTH)
        assert settled == WriteDecision.deny(WIDENING_REFUSED)


def test_a_narrower_breadth_with_a_wider_audience_is_refused():
    """A plugin kind is everyone's, whatever breadth it claims: moving a person's or a
    channel's write into one (a ``thread`` kind of breadth 40) widens the audience."""
    actor = RunActor({**ACTOR.scopes, "thread": "thread:x:T1"})
    breadth = {**BREADTH, "thread": 40}
    for target in ("user:slack:U1", "channel:slack:C1"):
        settled = settle_decision(target, WriteDecision.narrow("thread:x:T1", "x"), actor,
                                  breadth)
        assert settled == WriteDecision.deny(WIDENING_REFUSED)
    to_thread = WriteDecision.narrow("thread:x:T1", "x")
    assert settle_decision("org:acme", to_thread, actor, breadth) == to_thread


def test_a_scope_the_run_lacks_is_refused():
    decision = WriteDecision.narrow("user:slack:SOMEONE_ELSE", "x")
    assert settle_decision("org:acme", decision, ACTOR, BREADTH).scope_key is None


def test_a_non_decision_is_refused():
    assert settle_decision("org:acme", "user:slack:U1", ACTOR, BREADTH).scope_key is None


def test_visibility_parsing_treats_unknown_as_unstamped():
    assert parse_visibility("DM") is Visibility.DM
    assert parse_visibility("public") is Visibility.PUBLIC
    assert parse_visibility("secret-ish") is None
    assert parse_visibility(None) is None


def test_a_scopes_audience_is_its_person_its_channel_or_everyone():
    assert audience_of("user:slack:U1") is Audience.PERSON
    assert audience_of("channel:slack:C1") is Audience.ORIGIN
    for key in ("org:acme", "repo:o/n", "guild:discord:9"):
        assert audience_of(key) is Audience.EVERYONE
