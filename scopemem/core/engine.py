"""The one memory algorithm every store runs.

Stores differ only in how they persist; what a query returns, what a write does and what the
cap evicts are decided here, by pure functions over the rows a store hands in. A store that
feeds these functions the rows they ask for answers exactly like every other store.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TypeVar

import attrs

from scopemem.core.ranking import (
    SEED,
    QueryTerms,
    Ranking,
    ScopeStats,
    candidate_cap,
    grouped,
    query_terms,
    query_words,
    rank_candidates,
    rank_covered,
    rank_entries,
    score_candidates,
    term_weights,
    wire_query,
)
from scopemem.core.records import (
    Candidate,
    Kind,
    Record,
    Source,
    Status,
    WriteCounts,
    with_uses,
)
from scopemem.core.scopes import memory_id, record_seq
from scopemem.core.text import normalize_text
from scopemem.core.words import PLAIN, Analyzer

__all__ = [
    "SEED", "Dedup", "Insert", "QueryTerms", "Ranking", "Restate", "ScopeStats",
    "WriteAction", "bump_usage", "candidate_cap", "count_action", "grouped", "listing",
    "matches", "mint_record", "plan_eviction", "plan_sweep", "plan_write", "query_terms",
    "query_words", "rank_candidates", "rank_covered", "rank_entries", "rank_records",
    "record_terms", "scope_stats", "score_candidates", "term_weights", "wire_query",
]

T = TypeVar("T")


def record_terms(record: Record, analyzer: Analyzer = PLAIN) -> frozenset[str]:
    """Every term a record can be found by: those of its text and of its keywords."""
    terms = set(analyzer.terms(record.text))
    for keyword in record.keywords:
        terms.update(analyzer.terms(keyword))
    return frozenset(terms)


def scope_stats(terms: QueryTerms, held: Iterable[Collection[str]]) -> ScopeStats:
    """The statistics of a scope whose active records hold ``held`` (one collection of
    terms per record), for the query's terms (a term of several stems is held by a record
    holding any of them)."""
    wanted = frozenset(terms.stems)
    # stem → the query terms standing for it.
    owners: dict[str, list[str]] = {}
    for term in terms.terms:
        for stem in term.split(" "):
            owners.setdefault(stem, []).append(term)
    frequency: dict[str, int] = dict.fromkeys(terms.terms, 0)
    records = 0
    for record_terms_ in held:
        records += 1
        found = {term for stem in wanted.intersection(record_terms_) for term in owners[stem]}
        for term in found:
            frequency[term] += 1
    return ScopeStats(records, frequency)


def rank_records(records: Iterable[Record], query: str, limit: int, now: int,
                 ranking: Ranking = SEED) -> list[tuple[Record, float]]:
    """The ``limit`` best active records of one scope for ``query``, best first, each with
    its keyword match (``core.ranking``). Never mutates. The scope's statistics are
    counted from ``records``, which must be all of the scope's records."""
    terms = query_terms(query, ranking.analyzer)
    if not terms.terms or limit <= 0:
        return []
    entries = [(record_seq(record.id), record_terms(record, ranking.analyzer),
                record.source_thread_key, record.last_touched, record)
               for record in records if record.is_active]
    stats = scope_stats(terms, (entry[1] for entry in entries))
    return rank_entries(entries, terms, stats, limit, now, ranking)


def matches(record: Record, terms: QueryTerms, analyzer: Analyzer = PLAIN) -> bool:
    """The relevance gate: does the record hold one of the query's prefilter terms?"""
    return not record_terms(record, analyzer).isdisjoint(terms.prefilter_stems)


def bump_usage(record: Record, now: int) -> Record:
    """A record that was just returned by retrieval."""
    return with_uses(record, 1, now)


def listing(
    records: Iterable[Record], limit: int, query: str | None = None, kind: Kind | None = None,
    analyzer: Analyzer = PLAIN,
) -> list[Record]:
    """A human's (or the repository window's) view: active records, newest first, optionally
    only one kind and only those holding a query term (the relevance gate), the limit
    applied after the filters.

    A query with no tokens lists nothing (it asked for a filter that cannot match)."""
    selected = [record for record in records if record.is_active]
    if kind is not None:
        selected = [record for record in selected if record.kind == kind]
    if query is not None:
        terms = query_terms(query, analyzer)
        selected = [record for record in selected
                    if terms.terms and matches(record, terms, analyzer)]
    selected.sort(key=lambda record: record_seq(record.id), reverse=True)
    return selected[:max(0, limit)]


# --- writes ---------------------------------------------------------------------------------


@attrs.frozen
class Insert:
    """Insert the candidate as a new record; ``superseded`` is the retired target, if any.
    ``outranked``: the candidate was aimed at a record a person stated, which it may not
    retire, so it lands beside it instead."""

    superseded: Record | None = None
    outranked: bool = False


@attrs.frozen
class Dedup:
    """The candidate says what an active record already says: bump that record instead."""

    updated: Record


@attrs.frozen
class Restate:
    """The candidate was tagged as a restatement of a shown active record: strengthen it."""

    updated: Record


WriteAction = Insert | Dedup | Restate


def _active_in_scope(pool: Iterable[Record], scope_key: str, record_id: str) -> Record | None:
    for record in pool:
        if record.id == record_id and record.scope_key == scope_key and record.is_active:
            return record
    return None


def _may_merge(candidate: Candidate, target: Record) -> bool:
    """Whether ``candidate`` may become a bump of ``target`` (a restatement or a dedup)
    instead of a record of its own: only a record of its own kind. A fact merged into a
    summary would never be seen again, since the repository window shows facts only."""
    return target.kind == candidate.kind


def _may_retire(candidate: Candidate, target: Record) -> bool:
    """Whether ``candidate``'s ``supersedes`` may retire ``target``: a person may correct
    anything, the extractor only what the extractor inferred."""
    return candidate.source is Source.HUMAN or target.source is not Source.HUMAN


def _retired_by(scope_key: str, candidate: Candidate, pool: Sequence[Record]
                ) -> Record | None:
    """The record ``candidate``'s ``supersedes`` retires (rule 2 below), or None: an active
    record of the scope, other than the one it restates, that it may retire and does not
    merely repeat."""
    if not candidate.supersedes or candidate.supersedes == candidate.restates:
        return None
    target = _active_in_scope(pool, scope_key, candidate.supersedes)
    if target is None or not _may_retire(candidate, target):
        return None
    if _may_merge(candidate, target) and normalize_text(target.text) == normalize_text(
            candidate.text):
        return None
    return target


def plan_write(scope_key: str, candidate: Candidate, pool: Sequence[Record], now: int
               ) -> WriteAction:
    """Decide what one candidate does to a scope.

    ``pool`` must contain at least the active rows whose normalized text equals the
    candidate's, earliest first, and the rows the candidate's ``restates``/``supersedes``
    name; nothing else is read, so a store may pass exactly those rows or the whole scope.

    1. ``restates`` naming an active record of this scope and of the candidate's kind: bump
       its use count and last use, raise its confidence to the higher of the two, insert
       nothing. Otherwise, or when the candidate's ``supersedes`` would retire another
       record (a correction is never lost to a merge), fall through.
    2. ``supersedes`` naming an active record of this scope: the candidate dedups against
       that target only (same kind and text → bump it, nothing retired); otherwise the
       target is retired and the candidate inserted. A collision with some unrelated record
       never swallows a correction. An unresolved ``supersedes`` inserts unconditionally,
       and so does one a reflection candidate aims at a record a person stated (the person
       outranks the extractor: the candidate lands beside it, counted ``outranked``).
    3. Otherwise the earliest active record of the same kind with the same normalized text
       is bumped, or the candidate is inserted.
    """
    if candidate.restates and _retired_by(scope_key, candidate, pool) is None:
        target = _active_in_scope(pool, scope_key, candidate.restates)
        if target is not None and _may_merge(candidate, target):
            confidences = [c for c in (target.confidence, candidate.confidence) if c is not None]
            return Restate(attrs.evolve(
                target,
                use_count=target.use_count + 1,
                last_used_at=now,
                confidence=max(confidences) if confidences else None,
            ))

    norm = normalize_text(candidate.text)
    if candidate.supersedes:
        target = _active_in_scope(pool, scope_key, candidate.supersedes)
        if target is None:
            return Insert()
        if _may_merge(candidate, target) and normalize_text(target.text) == norm:
            return Dedup(attrs.evolve(target, use_count=target.use_count + 1))
        if not _may_retire(candidate, target):
            return Insert(outranked=True)
        return Insert(superseded=attrs.evolve(target, status=Status.SUPERSEDED))

    for record in pool:
        if (record.is_active and record.scope_key == scope_key and _may_merge(candidate, record)
                and normalize_text(record.text) == norm):
            return Dedup(attrs.evolve(record, use_count=record.use_count + 1))
    return Insert()


def count_action(action: WriteAction, candidate: Candidate) -> WriteCounts:
    """What one candidate's action adds to a write's counts."""
    if isinstance(action, Restate):
        return WriteCounts(restated=1)
    if isinstance(action, Dedup):
        return WriteCounts(deduped=1)
    return WriteCounts(inserted=1, superseded=0 if action.superseded is None else 1,
                       outranked=1 if action.outranked else 0,
                       inserted_summaries=1 if candidate.kind == Kind.SUMMARY else 0)


def mint_record(scope_key: str, seq: int, candidate: Candidate, now: int) -> Record:
    """The new record a candidate becomes. Pointers are kept as provenance of the writer's
    claim (empty ones dropped); the target's own status says whether the claim took effect."""
    return Record(
        id=memory_id(scope_key, seq),
        scope_key=scope_key,
        kind=candidate.kind,
        text=candidate.text,
        keywords=candidate.keywords or (),
        source_thread_key=candidate.source_thread_key,
        source_run_id=candidate.source_run_id,
        created_at=now,
        confidence=candidate.confidence,
        supersedes=candidate.supersedes or None,
        restates=candidate.restates or None,
        source=candidate.source,
    )


# --- the cap and the sweep ------------------------------------------------------------------


def eviction_order(seq: int, last_used_at: int | None, created_at: int
                   ) -> tuple[int, int, int]:
    """Where an active record stands in line for eviction, first out first: least recently
    used (last use, else creation), ties to the older record, then the lower seq."""
    return (created_at if last_used_at is None else last_used_at, created_at, seq)


def plan_eviction(active: Iterable[Record], cap: int) -> list[Record]:
    """The records to evict so at most ``cap`` active ones remain, in ``eviction_order``.
    Only active records count and only active records are evicted."""
    live = [record for record in active if record.is_active]
    excess = len(live) - cap
    if excess <= 0:
        return []
    live.sort(key=lambda r: eviction_order(record_seq(r.id), r.last_used_at, r.created_at))
    return [attrs.evolve(record, status=Status.EVICTED) for record in live[:excess]]


def evicted_seqs(active: Iterable[tuple[int, int | None, int]], excess: int) -> list[int]:
    """``plan_eviction`` for a store that reads only what the order needs: the seqs of the
    ``excess`` first in ``eviction_order`` of ``active`` rows (seq, last use, creation)."""
    if excess <= 0:
        return []
    ordered = sorted(dict.fromkeys(active), key=lambda row: eviction_order(*row))
    return [row[0] for row in ordered[:excess]]


def plan_sweep(
    active: Iterable[Record], markers: Callable[[str], list[str]] | None = None
) -> list[Record]:
    """The active facts the gate (``markers``, by default the built-in status gate's
    ``core.gate.rejection_markers``) would have refused, as they become once swept.
    Summaries are never gated: they are episodic by design."""
    if markers is None:
        from scopemem.core.gate import rejection_markers  # its rules load on the first sweep

        markers = rejection_markers
    return [
        attrs.evolve(record, status=Status.SWEPT)
        for record in active
        if record.is_active and record.kind == Kind.FACT and markers(record.text)
    ]
