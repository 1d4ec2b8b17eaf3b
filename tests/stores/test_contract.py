"""The store contract: every store answers these calls the same way.

Parametrized over the stores in ``tests/stores/conftest.py``; a store that fails one of these
answers differently from the others, which is a bug in that store.
"""

from __future__ import annotations

import asyncio
import unicodedata

import attrs
import pytest

from scopemem.core.hygiene import NO_THREAD_KEY
from scopemem.core.records import (
    MAX_KEYWORDS,
    MAX_SOURCE_CHARS,
    MAX_TEXT_CHARS,
    Kind,
    Record,
    Source,
    Status,
    WriteCounts,
)
from scopemem.errors import StoreError
from scopemem.stores.porting import export_records, portable
from scopemem.stores.worker import WorkerStore
from tests.conftest import DAY_MS, FakeClock, fact, summary

ORG = "org:acme"
OTHER = "user:slack:U2"


async def ids(store, scope=ORG, limit=50, **kw) -> list[str]:
    return [record.id for record in await store.list(scope, limit, **kw)]


# --- write → retrieve -----------------------------------------------------------------------


async def test_write_mints_namespaced_ids_with_provenance(store, clock: FakeClock):
    counts = await store.write(ORG, [
        fact("deploys need the vpn", source_run_id="r-1", keywords=("deploy",), confidence=0.8),
        summary("the deploy thread"),
    ])
    assert counts == WriteCounts(inserted=2, inserted_summaries=1)
    records = await store.list(ORG, 10)
    assert [r.id for r in records] == [f"mem:{ORG}:2", f"mem:{ORG}:1"]
    first = records[1]
    assert first.scope_key == ORG and first.kind == Kind.FACT
    assert first.source_thread_key == "slack:C1/100" and first.source_run_id == "r-1"
    assert first.keywords == ("deploy",) and first.confidence == 0.8
    assert first.created_at == clock.now and first.use_count == 0
    assert first.last_used_at is None and first.status == Status.ACTIVE


async def test_empty_batch_is_a_no_op(store):
    assert await store.write(ORG, []) == WriteCounts()
    assert await store.list(ORG, 10) == []


async def test_retrieve_is_scope_partitioned(store):
    await store.write(ORG, [fact("the staging cluster needs a vpn")])
    await store.write(OTHER, [fact("my staging cluster preference")])
    assert [r.scope_key for r in await store.retrieve(ORG, "staging", 10)] == [ORG]
    assert [r.scope_key for r in await store.retrieve(OTHER, "staging", 10)] == [OTHER]


async def test_retrieve_gates_on_whole_tokens_not_substrings(store):
    await store.write(ORG, [fact("use a token bucket"), fact("buckets leak"),
                            fact("the buckaroo rides")])
    # An inflection finds the word (one stem); a fragment finds nothing.
    assert sorted(r.text for r in await store.retrieve(ORG, "bucket", 10)) == [
        "buckets leak", "use a token bucket"]
    assert await store.retrieve(ORG, "buck", 10) == []
    # A function word alone never passes the gate, though the record holds it.
    assert await store.retrieve(ORG, "a", 10) == []
    assert await store.retrieve(ORG, "the", 10) == []


async def test_retrieve_matches_keywords_too(store):
    await store.write(ORG, [fact("run the migrations first", keywords=("alembic",))])
    assert [r.text for r in await store.retrieve(ORG, "alembic upgrade", 10)] == [
        "run the migrations first"]


async def test_retrieve_ranks_by_keyword_match_then_recency(store, clock: FakeClock):
    await store.write(ORG, [fact("deploy needs vpn")])
    clock.advance(DAY_MS)
    await store.write(ORG, [fact("deploy uses blue green")])
    clock.advance(DAY_MS)
    await store.write(ORG, [fact("deploy needs vpn and blue green")])
    got = [r.text for r in await store.retrieve(ORG, "deploy blue green", 10)]
    assert got == ["deploy needs vpn and blue green", "deploy uses blue green",
                   "deploy needs vpn"]


async def test_retrieve_limits_and_bumps_only_what_it_returns(store, clock: FakeClock):
    await store.write(ORG, [fact(f"cache rule {n}") for n in range(5)])
    clock.advance(1000)
    returned = await store.retrieve(ORG, "cache", 2)
    assert len(returned) == 2
    assert all(r.use_count == 1 and r.last_used_at == clock.now for r in returned)
    by_id = {r.id: r for r in await store.list(ORG, 10)}
    for record_id, record in by_id.items():
        bumped = record_id in {r.id for r in returned}
        assert record.use_count == (1 if bumped else 0)
        assert record.last_used_at == (clock.now if bumped else None)


async def test_retrieve_without_query_tokens_returns_nothing(store):
    await store.write(ORG, [fact("anything at all")])
    assert await store.retrieve(ORG, "", 10) == []
    assert await store.retrieve(ORG, "?!  —", 10) == []


async def test_fts_syntax_in_queries_is_inert(store):
    await store.write(ORG, [fact("the NEAR operator and OR words")])
    for query in ['"near', "near*", "NEAR(or, and)", "operator AND NOT", "text:near",
                  "^near -or"]:
        got = await store.retrieve(ORG, query, 10)
        assert [r.text for r in got] == ["the NEAR operator and OR words"], query


FOLDED = [
    # (the record, a query typed another way: no accents, other case, NFD)
    ("Le café est fermé le lundi", "CAFE ferme"),
    ("Das Büro in Zürich öffnet um acht", "zurich buro"),
    ("Straße gesperrt: nimm die Umleitung", "STRASSE"),
    ("Le déploiement échoue sans la clé", unicodedata.normalize("NFD", "déploiement")),
    ("İstanbul ofisi cumartesi kapalı", "istanbul"),
    ("Το κλειδί είναι στο συρτάρι", "ΚΛΕΙΔΙ"),
    ("Ключ от сервера лежит в ящике", "КЛЮЧ"),
    ("مفتاح الخادم في الدرج", "مَفْتَاح"),
    ("מפתח השרת במגירה", "מַפְתֵּחַ"),
    ("デプロイ前にテストを実行する", "テストを実行"),
    ("数据库需要先迁移", "数据库"),
]


@pytest.mark.parametrize(("text", "query"), FOLDED)
async def test_text_is_found_the_way_people_type_it(store, text, query):
    await store.write(ORG, [fact(text), fact("unrelated lunch note")])
    assert [r.text for r in await store.retrieve(ORG, query, 10)] == [text]


async def test_an_inflected_query_finds_the_record(store):
    await store.write(ORG, [fact("The deploys failed twice on Friday"),
                            fact("lunch is at noon")])
    assert [r.text for r in await store.retrieve(ORG, "deploying fails", 10)] == [
        "The deploys failed twice on Friday"]


async def test_a_rare_word_outranks_a_common_one_on_every_store(store, clock: FakeClock):
    await store.write(ORG, [fact("grafana alerts page the on-call")])
    clock.advance(DAY_MS)
    await store.write(ORG, [fact(f"deploy step {n} runs in ci") for n in range(8)])
    got = await store.retrieve(ORG, "deploy grafana", 3)
    # Newer records hold the common word; the older one holding the rare word leads.
    assert got[0].text == "grafana alerts page the on-call"


async def test_fragments_find_nothing(store):
    await store.write(ORG, [fact("Das Büro in Zürich"), fact("le café ouvre à 8h")])
    for query in ("rich", "caf", "ro", "8"):
        assert await store.retrieve(ORG, query, 10) == [], query
    assert len(await store.retrieve(ORG, "8h", 10)) == 1


async def test_nfc_and_nfd_texts_are_one_record(store):
    text = "Le café est fermé"
    await store.write(ORG, [fact(unicodedata.normalize("NFC", text))])
    counts = await store.write(ORG, [fact(unicodedata.normalize("NFD", text))])
    assert counts == WriteCounts(deduped=1)


async def test_more_than_24_query_tokens_keep_the_longest(store):
    await store.write(ORG, [fact("zz only"), fact("longestwordthere only")])
    filler = " ".join(f"w{n:03d}xx" for n in range(24))
    got = [r.text for r in await store.retrieve(ORG, f"zz {filler} longestwordthere", 10)]
    # The relevance gate keeps to the 24 longest terms on every store (the full-text
    # prefilter's rule, 000 items 5 and 17), so a record matched by nothing but the short
    # "zz" is found by none: every store answers alike.
    assert got == ["longestwordthere only"]


# --- dedup, supersede, restate ---------------------------------------------------------------


async def test_dedup_is_case_and_whitespace_insensitive(store):
    await store.write(ORG, [fact("Run  npm ci first")])
    counts = await store.write(ORG, [fact("  run npm CI\tfirst ")])
    assert counts == WriteCounts(deduped=1)
    [record] = await store.list(ORG, 10)
    assert record.use_count == 1 and record.text == "Run  npm ci first"


async def test_a_batch_dedups_against_its_own_earlier_insert(store):
    counts = await store.write(ORG, [fact("pin the node version"), fact("Pin the node version")])
    assert counts == WriteCounts(inserted=1, deduped=1)
    assert len(await store.list(ORG, 10)) == 1


async def test_supersede_retires_the_target_and_inserts_with_pointer(store):
    await store.write(ORG, [fact("the api lives on port 8080")])
    old = f"mem:{ORG}:1"
    counts = await store.write(ORG, [fact("the api lives on port 9090", supersedes=old)])
    assert counts == WriteCounts(inserted=1, superseded=1)
    [record] = await store.list(ORG, 10)
    assert record.supersedes == old and record.text.endswith("9090")
    assert [r.text for r in await store.retrieve(ORG, "port", 10)] == [record.text]


async def test_superseded_records_are_not_dedup_targets(store):
    await store.write(ORG, [fact("use yarn")])
    await store.write(ORG, [fact("use pnpm", supersedes=f"mem:{ORG}:1")])
    counts = await store.write(ORG, [fact("use yarn")])
    assert counts == WriteCounts(inserted=1)
    assert sorted(r.text for r in await store.list(ORG, 10)) == ["use pnpm", "use yarn"]


async def test_unknown_or_foreign_supersede_retires_nothing(store):
    await store.write(OTHER, [fact("a foreign record")])
    await store.write(ORG, [fact("keep me")])
    counts = await store.write(ORG, [
        fact("new one", supersedes="mem:org:acme:999"),
        fact("another", supersedes=f"mem:{OTHER}:1"),
    ])
    assert counts == WriteCounts(inserted=2)
    assert len(await store.list(ORG, 10)) == 3
    assert len(await store.list(OTHER, 10)) == 1


async def test_restating_the_superseded_text_is_a_bump(store):
    await store.write(ORG, [fact("tests need docker")])
    counts = await store.write(ORG, [fact("Tests need Docker", supersedes=f"mem:{ORG}:1")])
    assert counts == WriteCounts(deduped=1)
    [record] = await store.list(ORG, 10)
    assert record.id == f"mem:{ORG}:1" and record.use_count == 1


async def test_collision_with_an_unrelated_record_never_swallows_a_correction(store):
    await store.write(ORG, [fact("the cache ttl is 60s"), fact("the cache ttl is 30s")])
    counts = await store.write(ORG, [fact("the cache ttl is 30s", supersedes=f"mem:{ORG}:1")])
    assert counts == WriteCounts(inserted=1, superseded=1)
    assert await ids(store) == [f"mem:{ORG}:3", f"mem:{ORG}:2"]
    # An unresolvable pointer still inserts rather than dedup against the collision.
    counts = await store.write(ORG, [fact("the cache ttl is 30s", supersedes="mem:org:acme:77")])
    assert counts == WriteCounts(inserted=1)


async def test_duplicate_norm_actives_dedup_into_the_earliest(store):
    await store.write(ORG, [fact("same text"), fact("other")])
    await store.write(ORG, [fact("same text", supersedes=f"mem:{ORG}:2")])  # now two actives
    counts = await store.write(ORG, [fact("SAME text")])
    assert counts == WriteCounts(deduped=1)
    by_id = {r.id: r.use_count for r in await store.list(ORG, 10)}
    assert by_id == {f"mem:{ORG}:1": 1, f"mem:{ORG}:3": 0}


async def test_empty_supersedes_is_no_supersede(store):
    await store.write(ORG, [fact("rebuild the index nightly")])
    counts = await store.write(ORG, [fact("rebuild the index nightly", supersedes="")])
    assert counts == WriteCounts(deduped=1)


async def test_restate_strengthens_the_target_and_inserts_nothing(store, clock: FakeClock):
    await store.write(ORG, [fact("the license check fails on dropped node_modules",
                                 confidence=0.7)])
    clock.advance(DAY_MS)
    counts = await store.write(ORG, [fact("license check: nested node_modules loss",
                                          restates=f"mem:{ORG}:1", confidence=0.9)])
    assert counts == WriteCounts(restated=1)
    [record] = await store.list(ORG, 10)
    assert record.text == "the license check fails on dropped node_modules"
    assert record.use_count == 1 and record.last_used_at == clock.now
    assert record.confidence == 0.9
    # A lower confidence never weakens it.
    await store.write(ORG, [fact("license again", restates=record.id, confidence=0.6)])
    assert (await store.list(ORG, 10))[0].confidence == 0.9


async def test_restate_of_a_missing_foreign_or_inactive_record_inserts(store):
    await store.write(OTHER, [fact("foreign")])
    await store.write(ORG, [fact("to forget")])
    assert await store.forget(ORG, f"mem:{ORG}:1")
    counts = await store.write(ORG, [
        fact("alpha", restates=f"mem:{ORG}:1"),       # forgotten
        fact("bravo", restates=f"mem:{OTHER}:1"),     # another scope
        fact("charlie", restates="mem:org:acme:404"),   # unknown
    ])
    assert counts == WriteCounts(inserted=3)


async def test_a_fact_never_merges_into_a_summary(store):
    # The window shows facts only: a fact turned into a bump of a summary would be lost.
    await store.write(ORG, [summary("the license check needs npm ci first")])
    counts = await store.write(ORG, [
        fact("a lesson", restates=f"mem:{ORG}:1"),                    # restates a summary
        fact("The license check needs npm ci first"),                 # same text as it
        fact("the license check needs npm ci first", supersedes=f"mem:{ORG}:1"),
    ])
    assert counts == WriteCounts(inserted=3, superseded=1)
    facts = await store.list(ORG, 10, kind=Kind.FACT)
    assert [r.text for r in facts] == ["the license check needs npm ci first",
                                       "The license check needs npm ci first", "a lesson"]
    # A fact still dedups against a fact, and a summary against a summary.
    assert await store.write(ORG, [fact("a lesson"), summary("the deploy thread"),
                                   summary("The deploy thread")]) == WriteCounts(
        deduped=2, inserted=1, inserted_summaries=1)


async def test_reflection_may_not_retire_what_a_person_stated(store):
    await store.write(ORG, [fact("deploys freeze on fridays", source=Source.HUMAN)])
    [stated] = await store.list(ORG, 10)
    assert stated.source is Source.HUMAN
    counts = await store.write(ORG, [fact("deploys run any day", supersedes=stated.id,
                                          confidence=0.6)])
    assert counts == WriteCounts(inserted=1, outranked=1)
    records = await store.list(ORG, 10)
    assert [(r.text, r.source) for r in records] == [
        ("deploys run any day", Source.REFLECTION),
        ("deploys freeze on fridays", Source.HUMAN)]
    assert records[0].supersedes == stated.id  # the claim is kept as provenance
    # A person may retire anything, a reflection record included.
    counts = await store.write(ORG, [fact("deploys freeze on fridays and holidays",
                                          supersedes=records[0].id, source=Source.HUMAN)])
    assert counts == WriteCounts(inserted=1, superseded=1)
    counts = await store.write(ORG, [fact("deploys freeze on weekends", supersedes=stated.id,
                                          source=Source.HUMAN)])
    assert counts == WriteCounts(inserted=1, superseded=1)
    assert [r.text for r in await store.list(ORG, 10)] == [
        "deploys freeze on weekends", "deploys freeze on fridays and holidays"]


async def test_every_store_fits_a_candidate_to_the_record_contract(store):
    long_keyword = "the-keyword-that-is-much-longer-than-sixty-four-characters-" + "x" * 20
    counts = await store.write(ORG, [
        fact("word " * 1000, keywords=[long_keyword, "ok", "  ", "ok"],
             source_thread_key=""),
        fact("broken \udc80 text", keywords=[f"k{n}" for n in range(30)]),
    ])
    assert counts == WriteCounts(inserted=2)
    second, first = await store.list(ORG, 10)
    assert len(first.text) <= MAX_TEXT_CHARS and first.text.endswith("word")
    assert first.source_thread_key == NO_THREAD_KEY
    assert first.keywords == ("the", "keyword", "that", "is", "much", "longer", "than",
                              "sixty", "four", "characters", "x" * 20, "ok")
    assert second.text == "broken \ufffd text" and len(second.keywords) == MAX_KEYWORDS
    assert [r.id for r in await store.retrieve(ORG, "sixty four", 5)] == [first.id]


async def test_no_store_keeps_a_nul_and_one_never_costs_its_batch(store):
    """PostgreSQL cannot keep a NUL character: every store removes it from every string,
    so the same batch lands the same way everywhere, the good candidates beside it too."""
    counts = await store.write(ORG, [
        fact("deploys need\x00 the vpn", keywords=("vpn\x00", "deploy"),
             source_thread_key="slack:C1/\x00100", source_run_id="r-\x001",
             supersedes="mem:org:acme:9\x00", restates="\x00"),
        fact("the license check needs npm ci first"),
        summary("a thread about \x00deploys"),
    ])
    assert counts == WriteCounts(inserted=3, inserted_summaries=1)
    stored = await store.list(ORG, 10)
    assert [r.text for r in stored] == ["a thread about deploys",
                                        "the license check needs npm ci first",
                                        "deploys need the vpn"]
    first = stored[2]
    assert first.keywords == ("vpn", "deploy")
    assert (first.source_thread_key, first.source_run_id) == ("slack:C1/100", "r-1")
    assert first.supersedes == "mem:org:acme:9" and first.restates is None
    # A query holding one answers as the query without it.
    assert [r.id for r in await store.retrieve(ORG, "vpn\x00", 5)] == [first.id]
    assert [r.id for r in await store.list(ORG, 5, query="\x00vpn")] == [first.id]
    # A secret split by one is seen whole by redaction: never joined again once stored.
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2
    await store.write(OTHER, [fact(f"the bot uses {token[:12]}\x00{token[12:]} to push",
                                   source_thread_key=f"t/{token[:9]}\x00{token[9:]}")])
    [split] = await store.list(OTHER, 1)
    for value in (split.text, split.source_thread_key):
        assert token not in value and "[REDACTED:" in value


async def test_thread_keys_and_run_ids_are_capped_and_redacted(store):
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2  # a GitHub token's shape
    await store.write(ORG, [
        fact("deploys need the vpn", source_thread_key="t" * 500_000,
             source_run_id="r" * 10_000),
        fact("the license check needs npm ci first", source_thread_key=f"slack:C1/{token}",
             source_run_id=f"run {token}"),
    ])
    second, first = await store.list(ORG, 10)
    assert first.source_thread_key == "t" * MAX_SOURCE_CHARS
    assert first.source_run_id == "r" * MAX_SOURCE_CHARS
    for value in (second.source_thread_key, second.source_run_id):
        assert token[4:] not in value and "[REDACTED:" in value
    # A pointer too long to be an id names no record: dropped, not kept.
    await store.write(ORG, [fact("deploys run on fridays", supersedes="mem:" + "x" * 500)])
    assert (await store.list(ORG, 1))[0].supersedes is None


NOISE = ["", "   ", "!!", "ok", "?!…—", "\x00\x00\x00", "Tool called: bash ls -la",
         "Tool result for bash: 3 files", "Step completed: build",
         '{"plan": ["build", "test"]}', '[{"step": 1, "tool": "bash"}]']


async def test_noise_is_dropped_and_counted_by_every_store(store):
    """The salience rule: nothing without words takes a slot, on any store."""
    texts = [text for text in NOISE if text]  # a Candidate's text is never empty
    counts = await store.write(ORG, [fact(text) for text in texts]
                               + [fact("the license check needs npm ci first")])
    assert counts == WriteCounts(inserted=1, dropped=len(texts))
    assert [r.text for r in await store.list(ORG, 50)] == [
        "the license check needs npm ci first"]
    # A batch of noise alone writes nothing, and makes no scope.
    assert await store.write(OTHER, [summary("ok")]) == WriteCounts(dropped=1)
    assert await store.list(OTHER, 10) == []


# --- list ------------------------------------------------------------------------------------


async def test_list_is_newest_first_limited_and_never_bumps(store):
    await store.write(ORG, [fact(f"note {n}") for n in range(5)])
    records = await store.list(ORG, 3)
    assert [r.text for r in records] == ["note 4", "note 3", "note 2"]
    assert all(r.use_count == 0 and r.last_used_at is None for r in await store.list(ORG, 10))


async def test_list_filters_by_kind(store):
    await store.write(ORG, [fact("a fact"), summary("a summary"), fact("b fact")])
    assert [r.text for r in await store.list(ORG, 10, kind=Kind.FACT)] == ["b fact", "a fact"]
    assert [r.text for r in await store.list(ORG, 10, kind=Kind.SUMMARY)] == ["a summary"]


async def test_list_query_keeps_whole_token_hits_limit_after_filter(store):
    await store.write(ORG, [
        fact("deploy via ci"), fact("unrelated"), fact("ci is slow", keywords=("deploy",)),
        fact("deployment docs"), fact("more unrelated"),
    ])
    got = await store.list(ORG, 1, query="deploy")
    assert [r.text for r in got] == ["deployment docs"]
    got = await store.list(ORG, 10, query="deploy")
    assert [r.text for r in got] == ["deployment docs", "ci is slow", "deploy via ci"]
    assert await store.list(ORG, 10, query="deplo") == []
    assert await store.list(ORG, 10, query="...") == []
    assert all(r.use_count == 0 for r in await store.list(ORG, 10))


# --- forget ----------------------------------------------------------------------------------


async def test_forget_soft_deletes_once(store):
    await store.write(ORG, [fact("forget me please"), fact("keep")])
    target = f"mem:{ORG}:1"
    assert await store.forget(ORG, target) is True
    assert await store.forget(ORG, target) is False
    assert await ids(store) == [f"mem:{ORG}:2"]
    assert await store.retrieve(ORG, "forget", 10) == []
    counts = await store.write(ORG, [fact("forget me please")])
    assert counts == WriteCounts(inserted=1)


async def test_forget_of_unknown_or_foreign_ids_changes_nothing(store):
    await store.write(ORG, [fact("stays")])
    await store.write(OTHER, [fact("also stays")])
    assert await store.forget(ORG, "mem:org:acme:99") is False
    assert await store.forget(ORG, f"mem:{OTHER}:1") is False
    assert await store.forget(OTHER, f"mem:{ORG}:1") is False
    assert len(await store.list(ORG, 10)) == 1 and len(await store.list(OTHER, 10)) == 1


# --- the cap ---------------------------------------------------------------------------------


async def test_over_cap_write_evicts_least_recently_used(make_store, clock: FakeClock):
    store = await make_store(cap=3)
    await store.write(ORG, [fact("alpha one")])
    clock.advance(1000)
    await store.write(ORG, [fact("beta two")])
    clock.advance(1000)
    await store.write(ORG, [fact("gamma three")])
    clock.advance(1000)
    await store.retrieve(ORG, "alpha", 5)  # alpha is now the most recently used
    clock.advance(1000)
    counts = await store.write(ORG, [fact("delta four")])
    assert counts == WriteCounts(inserted=1, evicted=1)
    assert sorted(r.text for r in await store.list(ORG, 10)) == [
        "alpha one", "delta four", "gamma three"]
    assert await store.retrieve(ORG, "beta", 5) == []
    # An evicted record is no dedup target: restating it inserts a fresh one.
    clock.advance(1000)
    counts = await store.write(ORG, [fact("beta two")])
    assert counts.inserted == 1 and counts.evicted == 1


async def test_a_write_that_read_its_clock_before_a_commit_is_still_the_newer(
        make_store, clock: FakeClock):
    """Two processes writing one scope: a write reads its clock, then waits for the scope's
    lock while another commits. Committed later, it is the newer record: the cap evicts the
    other, never the write just acknowledged (seq order is the commit order)."""
    store = await make_store(cap=1)
    first_at = clock.advance(1000)
    await store.write(ORG, [fact("committed first")])
    clock.now -= 500  # the clock the second write read before the first committed
    counts = await store.write(ORG, [fact("committed second")], cap=1)
    assert counts == WriteCounts(inserted=1, evicted=1)
    kept = await store.list(ORG, 10)
    assert [r.text for r in kept] == ["committed second"]
    assert kept[0].created_at >= first_at  # never older than the record it follows


async def test_cap_counts_only_active_records(make_store):
    store = await make_store(cap=2)
    await store.write(ORG, [fact("one"), fact("two")])
    assert await store.forget(ORG, f"mem:{ORG}:1")
    await store.write(ORG, [fact("three", supersedes=f"mem:{ORG}:2")])
    counts = await store.write(ORG, [fact("four")])
    assert counts.evicted == 0
    assert len(await store.list(ORG, 10)) == 2


async def test_write_cap_argument_overrides_the_default(store):
    await store.write(ORG, [fact(f"note {n}") for n in range(4)])
    counts = await store.write(ORG, [fact("five")], cap=2)
    assert counts.evicted == 3
    assert len(await store.list(ORG, 10)) == 2


async def test_nothing_is_evicted_at_the_cap(make_store):
    store = await make_store(cap=3)
    counts = await store.write(ORG, [fact("alpha"), fact("bravo"), fact("charlie")])
    assert counts.evicted == 0


# --- retention ---------------------------------------------------------------------------------


@pytest.mark.parametrize("retention_days", [0, 1])
async def test_purged_dead_rows_change_no_answer_and_no_id_is_reused(
        make_store, clock: FakeClock, retention_days: int):
    store = await make_store(cap=2, retention_days=retention_days)
    await store.write(ORG, [fact("alpha one"), fact("beta two"), fact("gamma three")])
    await store.write(ORG, [fact("gamma, corrected", supersedes=f"mem:{ORG}:3")])
    assert await store.forget(ORG, f"mem:{ORG}:4")
    clock.advance(DAY_MS)
    # Every dead row is past the retention now: this write purges them.
    await store.write(ORG, [fact("delta four")])
    await store.write(ORG, [fact("alpha one")])  # an evicted text comes back as new
    assert [r.id for r in await store.list(ORG, 10)] == [f"mem:{ORG}:6", f"mem:{ORG}:5"]
    assert [r.text for r in await store.retrieve(ORG, "alpha gamma", 5)] == ["alpha one"]
    assert await store.forget(ORG, f"mem:{ORG}:1") is False
    assert await store.forget(ORG, f"mem:{ORG}:4") is False


# --- sweep -----------------------------------------------------------------------------------


STATUS_LINE = "PR 1835 was pushed at sha 3f9a2c1 with all 10512 tests passing"
STATUS_SUMMARY = "the thread pushed sha 3f9a2c1 and saw CI go green"
LESSON = "run npm ci before the license check; the allowlist is never the fix"


async def test_sweep_dry_run_lists_ids_and_changes_nothing(store):
    await store.write(ORG, [fact(STATUS_LINE), fact(LESSON), summary(STATUS_SUMMARY)])
    result = await store.sweep(ORG, dry_run=True)
    assert result.swept == 1 and result.ids == (f"mem:{ORG}:1",)
    assert len(await store.list(ORG, 10)) == 3


async def test_sweep_retires_marked_facts_only_and_is_idempotent(store):
    await store.write(ORG, [fact(STATUS_LINE), fact(LESSON), summary(STATUS_SUMMARY)])
    result = await store.sweep(ORG)
    assert result.swept == 1 and result.ids is None
    assert [r.kind for r in await store.list(ORG, 10)] == [Kind.SUMMARY, Kind.FACT]
    assert await store.retrieve(ORG, "sha", 10) != []  # the summary still matches
    assert all(r.kind == Kind.SUMMARY for r in await store.retrieve(ORG, "pushed", 10))
    assert (await store.sweep(ORG)).swept == 0
    # A swept record is no dedup target either.
    assert (await store.write(ORG, [fact(STATUS_LINE)])).inserted == 1


async def test_a_swept_row_past_the_retention_stays_with_its_text_scrubbed(
        make_store, clock: FakeClock):
    store = await make_store(cap=3, retention_days=1)
    await store.write(ORG, [fact(STATUS_LINE, keywords=("release",), source_run_id="r-7"),
                            fact(LESSON)])
    await store.write(ORG, [fact("the build uses node 18")])
    await store.write(ORG, [fact("the build uses node 20", supersedes=f"mem:{ORG}:3")])
    assert (await store.sweep(ORG)).swept == 1

    async def dead() -> dict[str, Record]:
        return {r.id: r async for r in export_records(portable(store), ORG)
                if not r.is_active}

    before = (await dead())[f"mem:{ORG}:1"]
    assert before.status is Status.SWEPT and before.text == STATUS_LINE
    clock.advance(DAY_MS)
    # Past the retention: this write applies it. The superseded row goes; the swept row
    # stays, its id, status, kind, provenance, times and counts kept, its text and
    # keywords scrubbed.
    assert (await store.write(ORG, [fact("a later lesson")])).evicted == 0
    after = await dead()
    assert list(after) == [f"mem:{ORG}:1"]
    assert after[f"mem:{ORG}:1"] == attrs.evolve(before, text="", keywords=())
    # Never read, listed, matched or a dedup target; not counted against the cap.
    assert await ids(store) == [f"mem:{ORG}:5", f"mem:{ORG}:4", f"mem:{ORG}:2"]
    assert await store.retrieve(ORG, "pushed sha tests passing release", 10) == []
    assert await store.forget(ORG, f"mem:{ORG}:1") is False
    assert (await store.write(ORG, [fact(STATUS_LINE)])).inserted == 1
    # Later writes past the retention keep it as it is.
    clock.advance(2 * DAY_MS)
    await store.write(ORG, [fact("one more lesson")])
    assert (await dead())[f"mem:{ORG}:1"] == attrs.evolve(before, text="", keywords=())


# --- concurrency and input -------------------------------------------------------------------


async def test_concurrent_batches_to_one_scope_get_unique_ids(store):
    batches = [[fact(f"batch {b} item {i}") for i in range(2)] for b in range(6)]
    results = await asyncio.gather(*(store.write(ORG, batch) for batch in batches))
    assert all(r == WriteCounts(inserted=2) for r in results)
    records = await store.list(ORG, 50)
    assert len(records) == 12 and len({r.id for r in records}) == 12


@pytest.mark.parametrize("bad", ["", "has space", "a\nb", "x" * 201])
async def test_bad_scope_keys_are_refused(store, bad):
    with pytest.raises(StoreError):
        await store.write(bad, [fact("x")])
    with pytest.raises(StoreError):
        await store.list(bad, 10)
    with pytest.raises(StoreError):
        await store.forget(bad, "mem:x:1")


async def test_a_closed_store_refuses_every_call_with_a_store_error(store):
    """After ``close()`` a call is a ``StoreError`` saying the store is closed, on every
    store: the in-process store went on answering, so a write after shutdown reported
    success for a record nobody would read again. A second ``close()`` is harmless."""
    await store.write(ORG, [fact("the api tests need make bootstrap first")])
    await store.close()
    calls = {"list": lambda: store.list(ORG, 10),
             "write": lambda: store.write(ORG, [fact("x y z lesson")]),
             "retrieve": lambda: store.retrieve(ORG, "bootstrap", 5),
             "forget": lambda: store.forget(ORG, f"mem:{ORG}:1"),
             "sweep": lambda: store.sweep(ORG)}
    if isinstance(store, WorkerStore):
        # The worker client's retrieval is advisory (seed 000 item 19): it reads nothing and
        # warns that the store is closed (tests/worker/test_client.py).
        assert await calls.pop("retrieve")() == []
    for name, call in calls.items():
        with pytest.raises(StoreError, match="closed"):
            await call()
            pytest.fail(f"{name} answered after close")
    await store.close()
