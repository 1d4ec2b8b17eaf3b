"""What a SQL store indexes for a record, and what ranking needs of its index: no SQL.

A record is indexed by the engine's own terms (``engine.record_terms``: its text's and its
keywords' terms under the configured analyzer), so the prefilter (rows holding any of a
query's prefilter terms) and the engine's gate can never disagree. The index is a postings
list per term, as the in-process store keeps it in memory (``stores.postings``), kept in a
table: ``postings_of`` gives the postings a batch adds, ``rank_inputs`` turns the postings a
retrieval read back into ``engine.rank_covered``'s input with the very functions the
in-process store ranks with, so every store's floats agree bit for bit.

Each posting also says whether its record continues its predecessor's thread (was written
just after a record of the same thread): the neighbour credit's "continues" set, read with
the postings (as the sign of the seq). The predecessor's thread never changes, and a
predecessor that is no longer active is no candidate, which is all the credit asks
(``ranking.rank_covered``).

The SQLite store space-joins the same terms (``sqlite.fts_tokens``) for FTS5.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from scopemem.core import engine
from scopemem.core.records import Record
from scopemem.core.scopes import record_seq
from scopemem.core.words import Analyzer
from scopemem.stores import postings as inverted
from scopemem.stores.shared.tokens import index_tokens

__all__ = ["postings_of", "rank_inputs", "record_tokens"]


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


def rank_inputs(rows: Iterable[tuple[str, Sequence[int]]], active: int,
                terms: engine.QueryTerms, ranking: engine.Ranking
                ) -> tuple[dict[int, float], float, set[int]]:
    """``rank_covered``'s covered weights, total weight and continues set, from the
    postings of the query's terms in a scope of ``active`` active records: per term, the
    seqs holding it, negated for a record that continues its predecessor's thread.

    A record has the same sign in every posting, so the weights are summed per signed seq
    (by the in-process store's own ``postings.covered``) and the signs read once per
    covered record, not once per posting."""
    postings = {term: seqs for term, seqs in rows if seqs}
    weights = engine.term_weights(terms, inverted.stats(postings, active, terms), ranking)
    signed = inverted.covered(postings, terms, weights)
    covered = {(seq if seq > 0 else -seq): weight for seq, weight in signed.items()}
    return covered, sum(weights), {-seq for seq in signed if seq < 0}
