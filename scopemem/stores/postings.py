"""A scope held as an inverted index (``postings``: each term mapped to the seqs of the
active records holding it, each record once), as the in-process store and the SQL stores'
copies hold it, and the scope's statistics for a query's terms (what
``engine.term_weights`` reads). Weighing is the engine's (``docs/storage.md``, "Where the
ranking lives").
"""

from __future__ import annotations

from scopemem.core import topk
from scopemem.core.ranking import QueryTerms, ScopeStats

__all__ = ["Postings", "stats"]

#: term → the seqs of the active records holding it (a list or a set: each record once).
Postings = topk.Postings


def stats(postings: Postings, records: int, terms: QueryTerms) -> ScopeStats:
    """The statistics of a scope of ``records`` active records, all of them indexed in
    ``postings``, for the query's terms (as the FTS vocabulary gives them)."""
    return ScopeStats(records, {term: len(postings.get(term, ())) for term in terms.terms})

