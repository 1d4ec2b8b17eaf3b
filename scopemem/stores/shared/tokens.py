"""The terms a record is indexed by, for every store that keeps an index of them.

They are the engine's own (``engine.record_terms``: the analyzer's terms of the record's
text and of its keywords), so a record matches a store's prefilter exactly when the
engine's gate says it holds a query term. Sorted, each once: a stable value to store (the
SQLite store space-joins them for FTS5, the PostgreSQL store keeps the array).
"""

from __future__ import annotations

from collections.abc import Sequence

from scopemem.core.words import PLAIN, Analyzer

__all__ = ["index_tokens"]


def index_tokens(text: str, keywords: Sequence[str], analyzer: Analyzer = PLAIN
                 ) -> list[str]:
    """The terms of ``text`` and of each keyword, sorted, each once."""
    terms = set(analyzer.terms(text))
    for keyword in keywords:
        terms.update(analyzer.terms(keyword))
    return sorted(terms)
