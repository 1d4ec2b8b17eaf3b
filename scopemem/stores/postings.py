"""What a retrieval reads of a scope held as an inverted index, for every store that holds one.

A store that keeps a scope's active records in memory (the SQLite store's ``ScopeView``, the
in-process store) keeps ``postings``: each term mapped to the seqs of the active records
holding it, each record once. These functions keep them and give the scope's statistics
for a query's terms (what ``engine.term_weights`` reads). The records are weighed by the
engine (``core.topk``, or ``stores.dense`` over the postings as arrays), always with its
one covered-weight sum (``ranking.covered_weights``), so every store's floats agree bit for
bit and every store answers with the same ids in the same order.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping

from scopemem.core import topk
from scopemem.core.ranking import QueryTerms, ScopeStats

__all__ = ["Postings", "post", "stats", "unpost", "work"]

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
    """How many postings ranking ``terms`` reads: the cost of weighing them."""
    return sum(len(postings.get(term, ())) for term in terms.terms)


def stats(postings: Postings, records: int, terms: QueryTerms) -> ScopeStats:
    """The statistics of a scope of ``records`` active records, all of them indexed in
    ``postings``, for the query's terms (as the FTS vocabulary gives them)."""
    return ScopeStats(records, {term: len(postings.get(term, ())) for term in terms.terms})

