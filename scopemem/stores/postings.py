"""What a retrieval reads of a scope held as an inverted index, for every store that holds one.

A store that keeps a scope's active records in memory (the SQLite store's ``ScopeView``, the
in-process store) keeps ``postings``: each term mapped to the seqs of the active records
holding it, each record once. From those postings these functions give what
``engine.rank_covered`` takes: the scope's statistics for a query's terms and, for every
record the ranking can need (``core.topk``; the stores holding the postings in memory
weigh them as arrays instead, ``stores.dense``), the weight of the query terms it holds.
The weights are summed in query-term order starting from 0.0, as ``ranking.covered_weight``
sums them, so every store's floats agree bit for bit and every store answers with the same
ids in the same order.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, MutableMapping, Sequence

from scopemem.core import topk
from scopemem.core.ranking import QueryTerms, ScopeStats

__all__ = ["Postings", "covered", "post", "stats", "unpost", "work"]

#: term → the seqs of the active records holding it (a list or a set: each record once).
Postings = topk.Postings


def post(postings: MutableMapping[str, set[int]], seq: int, terms: Iterable[str]) -> None:
    """Index the record ``seq`` under each of ``terms``."""
    for term in terms:
        holders = postings.get(term)
        if holders is None:
            postings[term] = {seq}
        else:
            holders.add(seq)


def unpost(postings: MutableMapping[str, set[int]], seq: int, terms: Iterable[str]) -> None:
    """Take the record ``seq`` out of each of ``terms`` (a term left with no record goes)."""
    for term in terms:
        holders = postings.get(term)
        if holders is not None:
            holders.discard(seq)
            if not holders:
                del postings[term]


def work(postings: Postings, terms: QueryTerms) -> int:
    """How many postings ranking ``terms`` reads: the cost of ``covered``."""
    return sum(len(postings.get(term, ())) for term in terms.terms)


def stats(postings: Postings, records: int, terms: QueryTerms) -> ScopeStats:
    """The statistics of a scope of ``records`` active records, all of them indexed in
    ``postings``, for the query's terms (as the FTS vocabulary gives them)."""
    return ScopeStats(records, {term: len(postings.get(term, ())) for term in terms.terms})


def covered(postings: Postings, terms: QueryTerms, weights: Sequence[float], limit: int,
            context: float = 0.0, continues: Container[int] = (),
            details: Mapping[int, tuple[int, object]] | None = None, now: int = 0
            ) -> dict[int, float]:
    """What ``engine.rank_covered`` takes: seq → the weight of the query terms the record
    holds, summed in query order (as ``ranking.covered_weight`` sums, so the floats agree),
    for only as many of the records holding a prefilter term as ranking ``limit`` hits with
    the neighbour credit ``context``, the thread continuations ``continues`` and (when
    given) the records' ``details`` at ``now`` needs to answer exactly as with all of them
    (``core.topk``, one record at a time: for postings read from a server, where weighing
    few matters; postings held in memory are weighed as arrays, ``stores.dense``)."""
    return topk.covered(postings, terms, weights, limit, context, continues, details, now)
