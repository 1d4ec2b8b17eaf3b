"""The terms a record is indexed by, for every store that keeps an index of them, and what
ranking needs of that index: no SQL.

They are the engine's own (``engine.record_terms``: the analyzer's terms of the record's
text and of its keywords), so a record matches a store's prefilter exactly when the
engine's gate says it holds a query term. Sorted, each once: a stable value to store (the
SQLite store space-joins them for FTS5, the PostgreSQL store keeps the array).

The index is a postings list per term, as the in-process store keeps it in memory
(``stores.postings``), kept in a table: ``postings_of`` gives the postings a batch adds;
``read_postings``, ``term_weights`` and ``covered`` turn the postings a retrieval read back
into ``engine.rank_covered``'s input with the very functions the in-process store ranks
with, so every store's floats agree bit for bit.

Each posting also says whether its record continues its predecessor's thread (was written
just after a record of the same thread): the neighbour credit's "continues" set, read with
the postings (each term's seqs come back as two arrays, by that flag). The predecessor's
thread never changes, and a predecessor that is no longer active is no candidate, which is
all the credit asks (``ranking.rank_covered``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet

from scopemem.core import engine, topk
from scopemem.core.records import Record
from scopemem.core.scopes import record_seq
from scopemem.core.words import PLAIN, Analyzer
from scopemem.stores import postings as inverted

__all__ = ["covered", "index_tokens", "postings_of", "read_postings", "record_tokens",
           "term_weights"]


def index_tokens(text: str, keywords: Sequence[str], analyzer: Analyzer = PLAIN
                 ) -> list[str]:
    """The terms of ``text`` and of each keyword, sorted, each once."""
    terms = set(analyzer.terms(text))
    for keyword in keywords:
        terms.update(analyzer.terms(keyword))
    return sorted(terms)


def record_tokens(record: Record, analyzer: Analyzer) -> list[str]:
    """The terms a record is indexed by, sorted (``shared.tokens.index_tokens``)."""
    return index_tokens(record.text, record.keywords, analyzer)


def postings_of(inserts: Sequence[Record], previous_thread: str | None, analyzer: Analyzer
                ) -> tuple[list[str], list[int], list[bool]]:
    """The postings of a batch's new records as three parallel lists: term, seq, and
    whether the record continues its predecessor's thread. ``inserts`` are the batch's
    records in seq order (active or not: a record the batch retired again posts nothing,
    but still precedes the next); ``previous_thread`` is the thread of the row just before
    the first (None when there is none)."""
    terms: list[str] = []
    seqs: list[int] = []
    continues: list[bool] = []
    thread = previous_thread
    for record in inserts:
        if record.is_active:
            held = record_tokens(record, analyzer)
            terms.extend(held)
            seqs.extend([record_seq(record.id)] * len(held))
            continues.extend([record.source_thread_key == thread] * len(held))
        thread = record.source_thread_key
    return terms, seqs, continues


def read_postings(rows: Iterable[tuple[str, Sequence[int] | None, Sequence[int] | None]]
                  ) -> tuple[dict[str, set[int]], set[int]]:
    """The postings of a query's terms as read back (per term, the seqs holding it that do
    not continue their predecessor's thread and those that do, either None for none):
    term → the seqs, and the set of seqs that continue their predecessor's thread."""
    postings: dict[str, set[int]] = {}
    continues: set[int] = set()
    for term, plain, continuing in rows:
        holders = set(plain or ())
        if continuing:
            holders.update(continuing)
            continues.update(continuing)
        if holders:
            postings[term] = holders
    return postings, continues


def term_weights(postings: inverted.Postings, active: int, terms: engine.QueryTerms,
                 ranking: engine.Ranking) -> list[float]:
    """The query terms' weights in a scope of ``active`` active records, as the in-process
    store weighs them (``postings.stats``, ``engine.term_weights``)."""
    return engine.term_weights(terms, inverted.stats(postings, active, terms), ranking)


def covered(postings: inverted.Postings, continues: AbstractSet[int],
            terms: engine.QueryTerms, weights: Sequence[float], limit: int,
            ranking: engine.Ranking, touches: Mapping[int, tuple[int, object]] | None = None,
            now: int = 0) -> topk.Covered:
    """``rank_covered``'s covered weights for only the records ``limit`` hits can need
    (``core.topk``), so a brief that matches most of a large scope weighs a few hundred
    records, not all of them, and the answer is exactly the one weighing all of them
    gives."""
    return topk.covered(postings, terms, weights, limit, ranking.context_weight, continues,
                        touches, now)
