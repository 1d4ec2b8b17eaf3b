"""The one memory algorithm every store runs.

Stores differ only in how they persist; what a query returns, what a write does and what the
cap evicts are decided here, by pure functions over the rows a store hands in. A store that
feeds these functions the rows they ask for answers exactly like every other store.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TypeVar

import attrs

from scopemem.core.gate import rejection_markers
from scopemem.core.records import (
    MAX_QUERY_CHARS,
    Candidate,
    Kind,
    Record,
    Source,
    Status,
    WriteCounts,
)
from scopemem.core.scopes import memory_id, record_seq
from scopemem.core.scoring import (
    KEYWORD_WEIGHT,
    RECENCY_TAU_MS,
    RECENCY_WEIGHT,
    record_tokens,
)
from scopemem.core.text import distinct_tokens, normalize_text

# The FTS prefilter's terms: at most the 24 longest distinct query tokens. Longer tokens are
# the selective ones; a 4000-character query would otherwise become an OR of hundreds of
# terms. This cap is the prefilter's only (000 items 5 and 17): the relevance gate and the
# keyword match read every token of the query, so a store without a prefilter finds a record
# matched only by a dropped shorter token, and a store with one does not (an accepted trade).
MAX_MATCH_TOKENS = 24
# How many prefiltered candidates a store hands the engine: every match in a small scope,
# proportionally more for larger limits.
CANDIDATE_FLOOR = 50
CANDIDATES_PER_LIMIT = 5

T = TypeVar("T")


def query_tokens(query: str) -> list[str]:
    """The query's distinct tokens, in first-appearance order: what the relevance gate and
    the keyword match read.

    A query means the same on every store whatever its length: when its distinct tokens,
    space-joined, would not fit the wire's ``MAX_QUERY_CHARS``, only the longest that fit are
    kept (ties to the earlier), still in first-appearance order. ``wire_query`` sends exactly
    these tokens, so a remote store reads a long brief as a local one does."""
    tokens = distinct_tokens(query)
    if sum(map(len, tokens)) + len(tokens) - 1 <= MAX_QUERY_CHARS:
        return tokens
    kept: set[int] = set()
    used = -1  # n tokens take n - 1 separating spaces
    for index in sorted(range(len(tokens)), key=lambda i: (-len(tokens[i]), i)):
        cost = len(tokens[index]) + 1
        if used + cost <= MAX_QUERY_CHARS:
            kept.add(index)
            used += cost
    return [token for index, token in enumerate(tokens) if index in kept]


def wire_query(query: str) -> str:
    """``query`` in a form the wire accepts (at most ``MAX_QUERY_CHARS`` characters) that
    every store reads exactly as it reads ``query``: the query itself when it fits, else its
    ``query_tokens`` space-joined (which tokenize back to themselves)."""
    if len(query) <= MAX_QUERY_CHARS:
        return query
    return " ".join(query_tokens(query))


def match_tokens(query: str) -> list[str]:
    """The FTS prefilter's terms: the 24 longest of ``query_tokens``, ties broken by first
    appearance, in that order."""
    return _longest(query_tokens(query))


def _longest(tokens: Sequence[str]) -> list[str]:
    ranked = sorted(range(len(tokens)), key=lambda index: (-len(tokens[index]), index))
    return [tokens[index] for index in ranked[:MAX_MATCH_TOKENS]]


@attrs.frozen
class QueryTerms:
    """A query as ranking reads it, tokenized once.

    ``tokens`` is :func:`query_tokens`: a record passes the relevance gate when it holds one
    of them, and its keyword match is the share of them it holds. ``prefilter`` is
    :func:`match_tokens`, the terms a full-text prefilter matches candidates by (a subset of
    ``tokens``, equal to it as a set for any query of at most 24 distinct tokens)."""

    tokens: tuple[str, ...]
    prefilter: tuple[str, ...]


def query_terms(query: str) -> QueryTerms:
    tokens = query_tokens(query)
    return QueryTerms(tokens=tuple(tokens), prefilter=tuple(_longest(tokens)))


def candidate_cap(limit: int) -> int:
    return max(CANDIDATE_FLOOR, CANDIDATES_PER_LIMIT * limit)


def matches(record: Record, tokens: Iterable[str]) -> bool:
    """The relevance gate: does the record contain any of ``tokens`` as a whole token?"""
    have = record_tokens(record)
    return any(token in have for token in tokens)


def rank_records(records: Iterable[Record], query: str, limit: int, now: int) -> list[Record]:
    """The ``limit`` best active records for ``query``, best first. Never mutates.

    A record qualifies when it holds one of the query's tokens (the relevance gate, over the
    whole query); qualifying records are scored by the share of the query's tokens they
    hold. Ties go to the newer record, so the answer does not depend on the order a store
    happened to hand the records in."""
    return rank_entries(
        ((record_seq(record.id), record_tokens(record), record.last_touched, record)
         for record in records if record.is_active),
        query, limit, now)


def rank_entries(entries: Iterable[tuple[int, Collection[str], int, T]], query: str,
                 limit: int, now: int) -> list[T]:
    """:func:`rank_records` over light entries, for a store that can rank rows before (or
    instead of) building a ``Record`` for each.

    Each entry stands for one *active* record as ``(seq, tokens, last_touched, item)``:
    ``record_seq(record.id)``, the record's tokens (``record_tokens(record)``, or any
    collection of exactly those tokens, repeats allowed), ``record.last_touched``, and
    whatever the caller wants back. The answer is the items of the ``limit`` best entries,
    best first, decided exactly as :func:`rank_records` decides (which is this function over
    its active records)."""
    wanted = query_tokens(query)
    if not wanted or limit <= 0:
        return []
    # Set operations instead of token-by-token loops (the hot path of every retrieval): the
    # match is the number of distinct query tokens the record holds (the count
    # ``keyword_match`` takes), and the gate holds when that is not zero.
    wanted_set = frozenset(wanted)
    matched = ((seq, len(wanted_set.intersection(tokens)), last_touched, item)
               for seq, tokens, last_touched, item in entries)
    return rank_matched((entry for entry in matched if entry[1]), len(wanted), limit, now)


def rank_matched(entries: Iterable[tuple[int, int, int, T]], width: int, limit: int,
                 now: int) -> list[T]:
    """The last step of :func:`rank_entries`, for a store that finds the qualifying records
    and counts their matches itself (from an inverted index, say).

    Each entry is ``(seq, matched, last_touched, item)`` for one *active* record that holds
    at least one of the query's ``QueryTerms.tokens``, where ``matched`` is how many of those
    ``width`` tokens the record holds. Entries passed this way are ranked exactly as
    :func:`rank_entries` ranks the same records."""
    if limit <= 0:
        return []
    # ``score_of(matched / width, last_touched, now)``, unrolled: this runs for every
    # candidate of every retrieval, and the two calls cost more than the arithmetic. The
    # same operations in the same order give the same floats (a test holds them equal).
    exp = math.exp
    scored = []
    append = scored.append
    for seq, matched, last_touched, item in entries:
        age = now - last_touched
        append((-(KEYWORD_WEIGHT * (matched / width)
                  + RECENCY_WEIGHT * exp(-(age if age > 0 else 0) / RECENCY_TAU_MS)),
                -seq, item))
    # Best score first, the newer record (higher seq) first among equals; the items are
    # never compared (seqs are unique).
    scored.sort(key=_score_then_seq)
    return [item for _score, _seq, item in scored[:limit]]


_score_then_seq = operator.itemgetter(0, 1)


def bump_usage(record: Record, now: int) -> Record:
    """A record that was just returned by retrieval."""
    return attrs.evolve(record, use_count=record.use_count + 1, last_used_at=now)


def listing(
    records: Iterable[Record], limit: int, query: str | None = None, kind: Kind | None = None
) -> list[Record]:
    """A human's (or the repository window's) view: active records, newest first, optionally
    only one kind and only those a query token hits, the limit applied after the filters.

    A query with no tokens lists nothing (it asked for a filter that cannot match)."""
    selected = [record for record in records if record.is_active]
    if kind is not None:
        selected = [record for record in selected if record.kind == kind]
    if query is not None:
        gate = query_tokens(query)
        selected = [record for record in selected if gate and matches(record, gate)]
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


def plan_write(scope_key: str, candidate: Candidate, pool: Sequence[Record], now: int
               ) -> WriteAction:
    """Decide what one candidate does to a scope.

    ``pool`` must contain at least the active rows whose normalized text equals the
    candidate's, earliest first, and the rows the candidate's ``restates``/``supersedes``
    name; nothing else is read, so a store may pass exactly those rows or the whole scope.

    1. ``restates`` naming an active record of this scope and of the candidate's kind: bump
       its use count and last use, raise its confidence to the higher of the two, insert
       nothing. Otherwise fall through.
    2. ``supersedes`` naming an active record of this scope: the candidate dedups against
       that target only (same kind and text → bump it, nothing retired); otherwise the
       target is retired and the candidate inserted. A collision with some unrelated record
       never swallows a correction. An unresolved ``supersedes`` inserts unconditionally,
       and so does one a reflection candidate aims at a record a person stated (the person
       outranks the extractor: the candidate lands beside it, counted ``outranked``).
    3. Otherwise the earliest active record of the same kind with the same normalized text
       is bumped, or the candidate is inserted.
    """
    if candidate.restates:
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


def plan_eviction(active: Iterable[Record], cap: int) -> list[Record]:
    """The records to evict so at most ``cap`` active ones remain: least recently used first
    (last use, else creation), ties to the older record, then the lower sequence number.
    Only active records count and only active records are evicted."""
    live = [record for record in active if record.is_active]
    excess = len(live) - cap
    if excess <= 0:
        return []
    live.sort(key=lambda r: (r.last_touched, r.created_at, record_seq(r.id)))
    return [attrs.evolve(record, status=Status.EVICTED) for record in live[:excess]]


def plan_sweep(
    active: Iterable[Record], markers: Callable[[str], list[str]] = rejection_markers
) -> list[Record]:
    """The active facts the gate would have refused, as they become once swept. Summaries are
    never gated: they are episodic by design."""
    return [
        attrs.evolve(record, status=Status.SWEPT)
        for record in active
        if record.is_active and record.kind == Kind.FACT and markers(record.text)
    ]
