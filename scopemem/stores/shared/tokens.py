"""The terms a record is indexed by, for every store that keeps an index of them, and what
ranking needs of that index: no SQL.

They are the engine's own (``engine.record_terms``), so a record matches a store's prefilter
exactly when the engine's gate says it holds a query term; sorted, each once. ``documents``
gives the postings a batch adds, each saying whether its record continues its predecessor's
thread (the neighbour credit's "continues" set; that thread never changes, and a
predecessor no longer active is no candidate). ``read_postings`` and ``Candidates`` turn the
postings a retrieval read back into ``engine.rank_covered``'s input with the functions the
in-process store ranks with, so every store's floats agree bit for bit.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Generic, TypeVar

from scopemem.core import engine, topk
from scopemem.core.records import Record
from scopemem.core.scopes import record_seq
from scopemem.core.words import PLAIN, Analyzer
from scopemem.stores import postings as inverted

if TYPE_CHECKING:
    from scopemem.stores.dense import DenseIndex

__all__ = ["Candidates", "documents", "index_tokens", "read_postings", "record_tokens"]

T = TypeVar("T")


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


def documents(inserts: Sequence[Record], previous_thread: str | None,
              tokens: Mapping[int, list[str]]) -> list[tuple[int, list[str], bool]]:
    """What a batch's new records post, as (seq, terms, whether the record continues its
    predecessor's thread), in seq order. ``inserts`` are the batch's records in seq order
    (active or not: a record the batch retired again posts nothing, but still precedes the
    next); ``previous_thread`` is the thread of the row just before the first (None when
    there is none); ``tokens``, each record's terms by seq."""
    posted = []
    thread = previous_thread
    for record in inserts:
        if record.is_active:
            seq = record_seq(record.id)
            posted.append((seq, tokens[seq], record.source_thread_key == thread))
        thread = record.source_thread_key
    return posted


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


class Candidates(Generic[T]):
    """A SQL store's retrieval from the query terms' ``postings`` in a scope of ``active``
    records, steps 2 and 3 (``docs/storage.md``, "One retrieval"): the store reads the rows
    of ``wanted``, hands them to ``found`` until it answers True, then ``ranked`` scores.

    Weighing: ``few`` (a few postings), every gated record; ``dense`` (a copy's arrays),
    every record at once; else ``core.topk``, only those ``limit`` hits can need (a brief
    matching most of a large scope weighs a few hundred records), exactly as weighing all.
    A candidate not found left active status since the postings were read (a concurrent
    forget): it leaves the postings (new sets: a copy's are shared), and the candidates are
    chosen again, so the weighing reaches past it."""

    def __init__(self, postings: Mapping[str, Collection[int]], continues: AbstractSet[int],
                 terms: engine.QueryTerms, limit: int, ranking: engine.Ranking, active: int,
                 now: int, *, touches: Mapping[int, tuple[int, object]] | None = None,
                 dense: DenseIndex | None = None, few: bool = False) -> None:
        self._postings, self._continues, self._terms = postings, continues, terms
        self._limit, self._ranking, self._now = limit, ranking, now
        self._touches, self._dense, self._few = touches, dense, few
        # As the in-process store weighs them (``postings.stats``, ``engine.term_weights``).
        self._weights = engine.term_weights(terms, inverted.stats(postings, active, terms),
                                            ranking)
        self._total = sum(self._weights)
        self._details: dict[int, tuple[int, T]] = {}
        self._choose(())

    def _choose(self, gone: Collection[int]) -> None:
        terms, weights, limit = self._terms, self._weights, self._limit
        context = self._ranking.context_weight
        if gone:
            self._postings = {term: frozenset(holders).difference(gone)
                              for term, holders in self._postings.items()}
        if self._few:
            held, shared = topk.covered_all(self._postings, terms, weights, context)
        elif self._dense is not None and not gone:
            held, shared = self._dense.covered(terms, weights, limit, context)
        else:
            held, shared = topk.covered(self._postings, terms, weights, limit, context,
                                        self._continues, self._touches, self._now)
        self._candidates = engine.rank_candidates(
            held, self._total, limit, self._ranking, _chained(held, self._continues),
            shared=shared)
        self.wanted = [seq for _match, seq in self._candidates if seq not in self._details]

    def found(self, details: Mapping[int, tuple[int, T]]) -> bool:
        """Take the wanted rows found active, seq → (last touch, row); False when some
        were not (``wanted`` is then what the candidates chosen again lack)."""
        self._details.update(details)
        gone = [seq for seq in self.wanted if seq not in self._details]
        if gone:
            self._choose(gone)
        return not gone

    def ranked(self) -> list[tuple[T, float]]:
        """The ``limit`` best rows, best first, each with its match."""
        if not self._candidates:
            return []
        return engine.score_candidates(self._candidates, self._limit, self._now,
                                       self._details)


def _chained(covered: Mapping[int, float], continues: AbstractSet[int]) -> AbstractSet[int]:
    """Of ``continues``, what the match reads (the covered records), as a set: a copy's is
    the whole scope's, and a set, not a frozenset, is what ``dict.keys() &`` intersects
    from its smaller side."""
    if type(continues) is set:
        return continues
    return {seq for seq in covered if seq in continues}
