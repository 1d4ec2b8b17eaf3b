"""What a SQL store's ``search``, ``list`` and ``mark_used`` start with, once for both."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from scopemem.core.ranking import QueryTerms, query_terms
from scopemem.core.words import Analyzer
from scopemem.stores.base import check_scope_key
from scopemem.stores.shared.batches import seqs_in_scope

__all__ = ["listing_stems", "search_terms", "used_seqs"]


def search_terms(scope_key: str, query: str, limit: int, analyzer: Analyzer
                 ) -> QueryTerms | None:
    """What a SQL store's ``search`` starts with: the key checked, the query's terms; None
    when nothing can match (no term, or no room)."""
    check_scope_key(scope_key)
    terms = query_terms(query, analyzer)
    return terms if terms.terms and limit > 0 else None


def listing_stems(scope_key: str, limit: int, query: str | None, analyzer: Analyzer
                  ) -> list[str] | None:
    """What a SQL store's ``list`` starts with: the key checked, the stems its rows must
    hold (None: any row); ``[]`` when nothing can match (a query of no term, or no room)."""
    check_scope_key(scope_key)
    if limit <= 0:
        return []
    return None if query is None else list(query_terms(query, analyzer).prefilter_stems)


def used_seqs(used: Mapping[str, Sequence[str]]) -> Iterator[tuple[str, list[int]]]:
    """``mark_used``'s scopes in turn (each key checked), with its ids' seqs, sorted and
    distinct (an id not of the scope dropped); a scope left with none is skipped."""
    for scope_key, ids in used.items():
        seqs = sorted(set(seqs_in_scope(check_scope_key(scope_key), ids)))
        if seqs:
            yield scope_key, seqs
