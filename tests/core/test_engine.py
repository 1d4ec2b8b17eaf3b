from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st

from scopemem.core import engine
from scopemem.core.engine import Dedup, Insert, Restate
from scopemem.core.records import (
    MAX_QUERY_CHARS,
    Candidate,
    Kind,
    Record,
    Source,
    Status,
    WriteCounts,
)

NOW = 1_790_000_000_000
SCOPE = "org:acme"


def engine_prefilter(query):
    return list(engine.query_terms(query).prefilter)


def rec(n: int, text: str, **fields) -> Record:
    fields.setdefault("created_at", NOW - 1000 * (100 - n))
    fields.setdefault("source_thread_key", "t")
    fields.setdefault("scope_key", SCOPE)
    fields.setdefault("kind", Kind.FACT)
    return Record(id=f"mem:{fields['scope_key']}:{n}", text=text, **fields)


def cand(text: str, **fields) -> Candidate:
    return Candidate(kind=fields.pop("kind", Kind.FACT), text=text, source_thread_key="t",
                     **fields)


# --- match tokens and ranking ----------------------------------------------------------------


def test_match_tokens_keeps_the_24_longest_ties_by_first_appearance():
    words = [f"w{n:02d}" for n in range(30)]  # 30 tokens of equal length
    query = "a bb " + " ".join(words) + " longest"
    tokens = engine_prefilter(query)
    assert len(tokens) == 24
    assert tokens[0] == "longest"
    assert tokens[1:] == words[:23]
    assert engine_prefilter("b a b c") == ["b", "a", "c"]
    assert engine_prefilter("") == []


def test_candidate_cap_has_a_floor_of_50():
    assert engine.candidate_cap(1) == 50
    assert engine.candidate_cap(10) == 50
    assert engine.candidate_cap(32) == 160


def test_listing_is_newest_first_with_filters_then_limit():
    records = [rec(1, "alpha fact"), rec(2, "beta", kind=Kind.SUMMARY),
               rec(3, "alpha again"), rec(4, "alpha gone", status=Status.FORGOTTEN)]
    assert [r.id[-1] for r in engine.listing(records, 10)] == ["3", "2", "1"]
    assert [r.id[-1] for r in engine.listing(records, 10, kind=Kind.FACT)] == ["3", "1"]
    assert [r.id[-1] for r in engine.listing(records, 1, query="alpha")] == ["3"]
    assert engine.listing(records, 10, query="  ") == []


# --- plan_write ------------------------------------------------------------------------------


def test_plan_write_inserts_new_text():
    assert engine.plan_write(SCOPE, cand("new"), [rec(1, "old")], NOW) == Insert()


def test_plan_write_dedups_on_normalized_text_against_the_earliest():
    pool = [rec(1, "Same  Text"), rec(2, "same text")]
    action = engine.plan_write(SCOPE, cand(" same TEXT "), pool, NOW)
    assert action == Dedup(attrs.evolve(pool[0], use_count=1))


def test_plan_write_never_dedups_against_inactive_or_foreign_rows():
    pool = [rec(1, "x", status=Status.SUPERSEDED), rec(2, "x", scope_key="org:other")]
    assert engine.plan_write(SCOPE, cand("x"), pool, NOW) == Insert()


def test_supersede_of_an_active_target_retires_it():
    target = rec(1, "port 8080")
    action = engine.plan_write(SCOPE, cand("port 9090", supersedes=target.id), [target], NOW)
    assert action == Insert(superseded=attrs.evolve(target, status=Status.SUPERSEDED))


def test_supersede_restating_the_target_is_a_bump():
    target = rec(1, "port 8080")
    action = engine.plan_write(SCOPE, cand("PORT 8080", supersedes=target.id), [target], NOW)
    assert action == Dedup(attrs.evolve(target, use_count=1))


def test_supersede_collision_guard():
    target, unrelated = rec(1, "ttl 60"), rec(2, "ttl 30")
    action = engine.plan_write(SCOPE, cand("ttl 30", supersedes=target.id),
                               [target, unrelated], NOW)
    assert isinstance(action, Insert) and action.superseded is not None
    action = engine.plan_write(SCOPE, cand("ttl 30", supersedes="mem:org:acme:99"),
                               [unrelated], NOW)
    assert action == Insert()


def test_empty_supersedes_is_no_supersede():
    pool = [rec(1, "x")]
    assert isinstance(engine.plan_write(SCOPE, cand("x", supersedes=""), pool, NOW), Dedup)


def test_restate_bumps_use_recency_and_confidence():
    target = rec(1, "lesson", confidence=0.7, use_count=2)
    action = engine.plan_write(SCOPE, cand("paraphrase", restates=target.id, confidence=0.9),
                               [target], NOW)
    assert action == Restate(attrs.evolve(target, use_count=3, last_used_at=NOW,
                                          confidence=0.9))
    lower = engine.plan_write(SCOPE, cand("p", restates=target.id, confidence=0.6),
                              [target], NOW)
    assert isinstance(lower, Restate) and lower.updated.confidence == 0.7
    assert lower.updated.text == "lesson"


def test_restate_of_inactive_or_foreign_falls_through():
    gone = rec(1, "lesson", status=Status.SWEPT)
    foreign = rec(2, "lesson two", scope_key="user:slack:U1")
    assert engine.plan_write(SCOPE, cand("new", restates=gone.id), [gone], NOW) == Insert()
    assert engine.plan_write(SCOPE, cand("new", restates=foreign.id), [foreign], NOW) == Insert()
    # Falling through still dedups by text.
    same = rec(3, "new")
    assert isinstance(engine.plan_write(SCOPE, cand("new", restates=gone.id), [gone, same],
                                        NOW), Dedup)


def test_a_correction_that_also_restates_another_record_retires_its_target():
    """A fact naming one record it replaces and another it restates was taken as the
    restatement alone: the record it corrects stayed active, and its pointer was lost. The
    correction wins: the target retires and the fact lands carrying both pointers."""
    stale, current = rec(1, "the license check runs on every push"), rec(2, "runs nightly")
    both = cand("the license check runs nightly, never on a push", supersedes=stale.id,
                restates=current.id)
    action = engine.plan_write(SCOPE, both, [stale, current], NOW)
    assert action == Insert(superseded=attrs.evolve(stale, status=Status.SUPERSEDED))
    minted = engine.mint_record(SCOPE, 3, both, NOW)
    assert (minted.supersedes, minted.restates) == (stale.id, current.id)
    # With nothing to retire (gone, a person's, the restated record itself) it restates.
    stated = rec(3, "the license check runs hourly", source=Source.HUMAN)
    for target, pool in ((None, [current]), (stated, [stated, current]),
                         (current, [current])):
        pointer = target.id if target else "mem:org:acme:99"
        action = engine.plan_write(SCOPE, cand("p", supersedes=pointer, restates=current.id),
                                   pool, NOW)
        assert isinstance(action, Restate) and action.updated.id == current.id


def test_count_action():
    lesson, summary = cand("x"), cand("x", kind=Kind.SUMMARY)
    assert engine.count_action(Insert(), lesson) == WriteCounts(inserted=1)
    assert engine.count_action(Insert(), summary) == WriteCounts(inserted=1,
                                                                 inserted_summaries=1)
    assert engine.count_action(Insert(superseded=rec(1, "x")), lesson) == WriteCounts(
        inserted=1, superseded=1)
    assert engine.count_action(Insert(outranked=True), lesson) == WriteCounts(
        inserted=1, outranked=1)
    assert engine.count_action(Dedup(rec(1, "x")), lesson) == WriteCounts(deduped=1)
    assert engine.count_action(Restate(rec(1, "x")), lesson) == WriteCounts(restated=1)


def test_mint_record_shape():
    record = engine.mint_record(SCOPE, 7, cand("text", keywords=("k",), supersedes="",
                                               confidence=0.8), NOW)
    assert record.id == "mem:org:acme:7" and record.scope_key == SCOPE
    assert record.created_at == NOW and record.use_count == 0 and record.last_used_at is None
    assert record.keywords == ("k",) and record.supersedes is None
    assert record.status == Status.ACTIVE and record.confidence == 0.8


# --- eviction and sweep ----------------------------------------------------------------------


def test_plan_eviction_nothing_at_or_under_cap():
    records = [rec(n, f"r{n}") for n in range(1, 4)]
    assert engine.plan_eviction(records, 3) == []
    assert engine.plan_eviction(records, 5) == []


def test_plan_eviction_least_recently_used_first_ties_to_older():
    a = rec(1, "a", created_at=100, last_used_at=900)
    b = rec(2, "b", created_at=200)                    # last touched 200
    c = rec(3, "c", created_at=150, last_used_at=200)  # same touch as b, created earlier
    d = rec(4, "d", created_at=300)
    gone = rec(5, "e", created_at=1, status=Status.FORGOTTEN)
    evicted = engine.plan_eviction([a, b, c, d, gone], 2)
    assert [r.id[-1] for r in evicted] == ["3", "2"]
    assert all(r.status == Status.EVICTED for r in evicted)


@given(st.lists(st.tuples(st.integers(0, 5), st.one_of(st.none(), st.integers(0, 5))),
                max_size=30), st.integers(0, 12))
def test_the_seqs_a_lean_store_evicts_are_the_engine_s(times, excess):
    """``evicted_seqs`` over (seq, last use, creation) rows evicts exactly the records
    ``plan_eviction`` does over the whole records, ties included."""
    records = [rec(seq, f"r{seq}", created_at=created, last_used_at=used)
               for seq, (created, used) in enumerate(times, start=1)]
    rows = [(seq, used, created) for seq, (created, used) in enumerate(times, start=1)]
    planned = engine.plan_eviction(records, len(records) - excess)
    assert engine.evicted_seqs(rows, excess) == [int(r.id.rsplit(":", 1)[1]) for r in planned]


def test_plan_sweep_takes_marked_active_facts_only():
    status = "PR 12 was merged at sha 3f9a2c1"
    records = [rec(1, status), rec(2, "run npm ci first"),
               attrs.evolve(rec(3, status), kind=Kind.SUMMARY),
               rec(4, status, status=Status.FORGOTTEN)]
    swept = engine.plan_sweep(records)
    assert [r.id for r in swept] == [records[0].id]
    assert swept[0].status == Status.SWEPT


# --- properties ------------------------------------------------------------------------------

words = st.sampled_from(["deploy", "vpn", "Deploy", "npm", "ci", "  ci", "port"])
texts = st.lists(words, min_size=1, max_size=3).map(" ".join)


@st.composite
def pools(draw):
    n = draw(st.integers(0, 6))
    return [rec(i + 1, draw(texts),
                status=draw(st.sampled_from([Status.ACTIVE, Status.ACTIVE, Status.SUPERSEDED])),
                confidence=draw(st.none() | st.floats(0, 1)))
            for i in range(n)]


pointers = st.none() | st.just("") | st.integers(1, 8).map(lambda n: f"mem:{SCOPE}:{n}")


@given(pool=pools(), text=texts, supersedes=pointers, restates=pointers,
       confidence=st.none() | st.floats(0, 1))
def test_plan_write_properties(pool, text, supersedes, restates, confidence):
    candidate = cand(text, supersedes=supersedes, restates=restates, confidence=confidence)
    action = engine.plan_write(SCOPE, candidate, pool, NOW)
    by_id = {r.id: r for r in pool}
    if isinstance(action, Insert):
        if action.superseded is not None:
            # Only the named, active, same-scope target is ever retired.
            original = by_id[action.superseded.id]
            assert original.is_active and original.id == supersedes
            assert action.superseded.status == Status.SUPERSEDED
        return
    original = by_id[action.updated.id]
    # A bump or a restate only ever touches an active record of the scope, keeps its text,
    # its scope and its status, and adds exactly one use.
    assert original.is_active and original.scope_key == SCOPE
    assert action.updated.text == original.text and action.updated.status == Status.ACTIVE
    assert action.updated.use_count == original.use_count + 1
    if isinstance(action, Restate):
        assert original.id == restates
        assert action.updated.last_used_at == NOW
        known = [c for c in (original.confidence, confidence) if c is not None]
        assert action.updated.confidence == (max(known) if known else None)
    elif supersedes:
        assert original.id == supersedes


# --- issue 12: the whole query gates, long queries, kinds, sources ------------------------------


@given(st.lists(st.text(alphabet="ab cdéZ9-", max_size=30), max_size=400))
def test_a_query_goes_on_the_wire_within_the_cap_and_means_the_same(parts):
    query = " ".join(parts)
    sent = engine.wire_query(query)
    assert len(sent) <= MAX_QUERY_CHARS
    assert engine.query_words(sent) == engine.query_words(query)
    assert engine_prefilter(sent) == engine_prefilter(query)
    if len(query) <= MAX_QUERY_CHARS:
        assert sent == query


def test_a_20000_character_brief_keeps_every_distinct_token():
    brief = ("[ok] step 12 took 40 ms\n" * 840) + "why do the integration tests fail"
    assert len(brief) > 20_000
    sent = engine.wire_query(brief)
    assert len(sent) <= MAX_QUERY_CHARS
    assert engine.query_words(sent) == ["ok", "step", "12", "took", "40", "ms", "why", "do",
                                         "the", "integration", "tests", "fail"]


def test_distinct_tokens_beyond_the_cap_keep_the_longest_in_their_order():
    tokens = [f"t{n:04d}" for n in range(900)] + ["averyveryverylongtoken"]  # 5 chars each
    query = " ".join(tokens)
    kept = engine.query_words(query)
    assert sum(map(len, kept)) + len(kept) - 1 <= MAX_QUERY_CHARS
    assert kept[-1] == "averyveryverylongtoken"  # the longest, kept in its place
    assert kept[:-1] == tokens[:len(kept) - 1]  # then the earliest of the equal lengths


def test_a_fact_restates_or_dedups_only_against_a_fact():
    brief = rec(1, "npm ci fixes the license check", kind=Kind.SUMMARY)
    assert engine.plan_write(SCOPE, cand("x", restates=brief.id), [brief], NOW) == Insert()
    assert engine.plan_write(SCOPE, cand("NPM ci fixes the license check"), [brief],
                             NOW) == Insert()
    action = engine.plan_write(SCOPE, cand("npm ci fixes the license check",
                                           supersedes=brief.id), [brief], NOW)
    assert isinstance(action, Insert) and action.superseded.status is Status.SUPERSEDED
    # Of two same-text records, a fact dedups into the fact even when the summary is older.
    lesson_row = rec(2, "npm ci fixes the license check")
    action = engine.plan_write(SCOPE, cand("npm ci fixes the license check"),
                               [brief, lesson_row], NOW)
    assert isinstance(action, Dedup) and action.updated.id == lesson_row.id
    summary_action = engine.plan_write(
        SCOPE, cand("npm ci fixes the license check", kind=Kind.SUMMARY), [brief, lesson_row],
        NOW)
    assert isinstance(summary_action, Dedup) and summary_action.updated.id == brief.id


def test_a_reflection_candidate_never_retires_what_a_person_stated():
    stated = rec(1, "deploys freeze on fridays", source=Source.HUMAN)
    inferred = rec(2, "deploys freeze on mondays")
    outranked = engine.plan_write(SCOPE, cand("deploys run daily", supersedes=stated.id),
                                  [stated], NOW)
    assert outranked == Insert(outranked=True)
    assert engine.mint_record(SCOPE, 3, cand("x", source=Source.HUMAN), NOW).source is (
        Source.HUMAN)
    # The same words restated still strengthen it; a person may retire either kind.
    assert isinstance(engine.plan_write(SCOPE, cand("x", restates=stated.id), [stated], NOW),
                      Restate)
    for target in (stated, inferred):
        action = engine.plan_write(SCOPE, cand("new", supersedes=target.id,
                                               source=Source.HUMAN), [target], NOW)
        assert action.superseded is not None and not action.outranked
    action = engine.plan_write(SCOPE, cand("new", supersedes=inferred.id), [inferred], NOW)
    assert action.superseded is not None
