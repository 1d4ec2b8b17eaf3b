"""What a SQL store indexes for a record, and what ranking needs of the rows a prefilter
finds: no SQL, no dialect.

A record is indexed by the engine's own terms (``engine.record_terms``: its text's and its
keywords' terms under the configured analyzer), so the prefilter (rows holding any of a
query's prefilter terms) and the engine's gate can never disagree. A store's prefilter
answers, for each row it finds, which of the query's terms the row holds, as 1-based
positions in ``terms.terms``; ``hit_entries`` turns those answers into the scope's
statistics and ``engine.rank_entries``'s entries, so ranking is the engine's, bit for bit.

The SQLite store builds the same terms space-joined (``sqlite.fts_tokens``) for FTS5.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from scopemem.core import engine
from scopemem.core.records import Record
from scopemem.core.words import Analyzer

__all__ = ["HitRow", "hit_entries", "record_tokens"]

#: One prefilter hit: (seq, thread key, last touched, positions of the query terms held).
HitRow = tuple[int, str, int, Sequence[int]]


def record_tokens(record: Record, analyzer: Analyzer) -> list[str]:
    """The terms a record is indexed by, sorted (a stable array for the index)."""
    return sorted(engine.record_terms(record, analyzer))


def hit_entries(rows: Iterable[HitRow], terms: engine.QueryTerms, active: int
                ) -> tuple[engine.ScopeStats, list[tuple[int, frozenset[str], str, int, int]]]:
    """The scope's statistics and ``rank_entries``'s entries (the item is the seq) from the
    rows holding any query term, in a scope of ``active`` active records. Rows holding no
    prefilter term count for the statistics only (``rank_entries`` gates them out)."""
    words = terms.terms
    frequency = [0] * len(words)
    entries = []
    for seq, thread, touched, held in rows:
        for position in held:
            frequency[position - 1] += 1
        entries.append((seq, frozenset(words[position - 1] for position in held), thread,
                        touched, seq))
    return engine.ScopeStats(active, dict(zip(words, frequency, strict=True))), entries
