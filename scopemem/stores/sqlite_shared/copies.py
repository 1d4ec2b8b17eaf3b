"""A scope's copies in memory: its records beside its index, answers from them on the
event loop (``RowCopy``, ``answer``), and carrying both across this store's own write.

A write changes a scope's change counter, so the copy read before it (``postgres.cache``'s
``ScopeCopy``) would answer nothing after it, and a scope written several times a second
would be read from its postings on nearly every retrieval. But the write knows what it did
to the postings (``writes.Change``): when the copy held is at the counter the write's
transaction began at, nobody else committed to the scope between the copy and the write
(the transaction held the shard's write lock from that read to its commit), so the copy
plus the write's postings, minus those it took out, is the scope's index at the counter the
commit left: the copy is replaced by that one. When another process wrote in between, the
counters differ and nothing is carried: the copy is checked, found stale and dropped at
the next retrieval, as always.
"""

from __future__ import annotations

from collections.abc import Sequence

from scopemem.core import engine
from scopemem.core.records import Record, with_uses
from scopemem.core.scopes import record_seq
from scopemem.stores.postgres import tokens
from scopemem.stores.postgres.cache import PostingsCache, ScopeCopy, Touches, dense_index
from scopemem.stores.sqlite_shared.writes import Change

__all__ = ["LOOP_POSTINGS", "RowCopy", "answer", "carried", "carried_rows", "carry"]

#: Uses kept apart per row of a ``RowCopy`` before they are folded into the records (or, with
#: no moment to fold them, both copies dropped at sixteen times as many): a bound on what a
#: long-lived copy holds besides its rows.
MAX_KEPT_USES = 64
#: A query whose terms hold more postings than this is not weighed on the event loop.
LOOP_POSTINGS = 20_000


class RowCopy:
    """A scope's active records in memory beside its ``ScopeCopy`` at the same change
    counter, so a retrieval can be answered on the event loop with no call into SQLite
    while the shard's WAL-index header is the one read when the copy was last confirmed
    (``header``).

    Use counts: a record holds every use numbered up to its mark (``usage.PendingUses``
    numbers each add): the copy's, read with the rows, or the write's that replaced the
    record (``carried_rows``). Uses numbered after it are kept apart (``note``) and added
    whenever the record is read, so a use is counted once however late its retrieval
    comes back to the loop."""

    __slots__ = ("_built", "generation", "header", "kept", "mark", "marks", "records", "uses")

    def __init__(self, generation: int, records: dict[int, Record], mark: int) -> None:
        self.generation = generation
        self.records = records
        self.mark = mark
        self.marks: dict[int, int] = {}
        self.uses: dict[int, list[tuple[int, int]]] = {}  # seq → [(add number, when)]
        self.kept = 0  # the most uses kept apart for one record
        self.header: bytes | None = None
        self._built: dict[int, Record] = {}  # records with their kept uses, as last built

    def note(self, seqs: Sequence[int], now: int, added: int) -> bool:
        """One use at ``now``, numbered ``added``, of each of ``seqs`` its record does not
        hold; False when a record keeps more than ``MAX_KEPT_USES`` apart (fold them in)."""
        for seq in seqs:
            if seq in self.records and added > self.marks.get(seq, self.mark):
                kept = self.uses.setdefault(seq, [])
                kept.append((added, now))
                self._built.pop(seq, None)
                self.kept = max(self.kept, len(kept))
        return self.kept <= MAX_KEPT_USES

    def fold(self, mark: int) -> None:
        """Put the uses kept apart into the records and hold every use up to ``mark``: the
        caller knows every use numbered up to it is noted here, and that no write of the
        scope has read its rows since."""
        for seq in list(self.uses):
            record = self.record(seq)
            if record is not None:
                self.records[seq] = record
        self.uses.clear()
        self._built.clear()
        self.marks.clear()
        self.kept = 0
        self.mark = mark

    def hold(self, records: Sequence[Record], mark: int) -> None:
        """``fold``, with nothing kept apart, and ``records`` (records of this copy with
        one use more, the only uses numbered since their mark) in place of theirs."""
        assert not self.uses
        for record in records:
            self.records[record_seq(record.id)] = record
        self._built.clear()
        self.marks.clear()
        self.mark = mark

    def record(self, seq: int) -> Record | None:
        """The active record ``seq`` with every use counted so far."""
        record = self.records.get(seq)
        kept = self.uses.get(seq)
        if record is None or not kept:
            return record
        built = self._built.get(seq)
        if built is not None:
            return built
        mark = self.marks.get(seq, self.mark)
        count, last = 0, record.last_used_at
        for added, when in kept:
            if added > mark:
                count += 1
                if last is None or when > last:
                    last = when
        if not count:
            return record
        built = self._built[seq] = with_uses(record, count, last)
        return built


def answer(copy: ScopeCopy, rows: RowCopy, ranking: engine.Ranking,
           terms: engine.QueryTerms, limit: int, now: int
           ) -> list[tuple[Record, float]] | None:
    """The ranked records from the copies, as ``reads.search`` ranks them; None when the
    query is too heavy for the event loop."""
    postings = copy.terms(terms.terms)
    if sum(map(len, postings.values())) > LOOP_POSTINGS:
        return None
    weights = tokens.term_weights(postings, copy.active, terms, ranking)
    if copy.dense is not None:
        covered = copy.dense.covered(terms, weights, limit, ranking.context_weight)
    else:
        covered = tokens.covered(postings, copy.continues, terms, weights, limit, ranking,
                                 copy.touches, now)
    candidates = engine.rank_candidates(covered, sum(weights), limit, ranking,
                                        copy.continues)
    details: dict[int, tuple[int, Record]] = {}
    for _match, seq in candidates:
        record = rows.record(seq)
        if record is None:
            return None
        details[seq] = (record.last_touched, record)
    return engine.score_candidates(candidates, limit, now, details) if candidates else []


def carried_rows(rows: RowCopy, change: Change) -> RowCopy:
    """``rows`` with ``change`` applied, at the counter after it: its inserted and changed
    records replace theirs, holding the uses numbered up to its mark."""
    new = RowCopy(change.before + 1, dict(rows.records), rows.mark)
    new.marks = dict(rows.marks)
    new.uses = {seq: list(kept) for seq, kept in rows.uses.items()}
    new.kept = rows.kept
    retired = set(change.retired)
    for record in change.rows:
        seq = record_seq(record.id)
        new.records[seq] = record
        new.marks[seq] = change.mark
    # Then the rows it retired, those it inserted and evicted again among them.
    for seq in retired:
        new.records.pop(seq, None)
        new.marks.pop(seq, None)
        new.uses.pop(seq, None)
    return new


def carry(cache: PostingsCache, scope_key: str, change: Change) -> bool:
    """Replace the scope's copy by the one ``change`` leaves, when the copy held is at the
    counter the change began at; whether it was carried."""
    copy = cache.latest(scope_key)
    if copy is None or copy.generation != change.before:
        return False
    return cache.replace(scope_key, copy.generation, carried(copy, change))


def carried(copy: ScopeCopy, change: Change) -> ScopeCopy:
    """``copy`` with ``change`` applied, at the counter after it."""
    postings = dict(copy.postings)
    gone: dict[str, set[int]] = {}
    for term, seq in change.unposted:
        gone.setdefault(term, set()).add(seq)
    added: dict[str, set[int]] = {}
    for term, seq, _continues in change.posted:
        added.setdefault(term, set()).add(seq)
    for term in gone.keys() | added.keys():
        # Added first, then taken out: a row the write inserted and evicted again is in both.
        holders = (postings.get(term, frozenset()) | added.get(term, set())) - gone.get(
            term, set())
        if holders:
            postings[term] = frozenset(holders)
        else:
            postings.pop(term, None)
    retired = set(change.retired) | {seq for _term, seq in change.unposted}
    continues = frozenset((copy.continues
                           | {seq for _t, seq, continues in change.posted if continues})
                          - retired)
    touches = Touches(copy.touches)
    touches.update((seq, (touched, None)) for seq, touched in change.touched)
    for seq in retired:
        touches.pop(seq, None)
    return ScopeCopy(change.before + 1, change.active, postings, continues,
                     sum(map(len, postings.values())), touches, dense_index(postings, continues))
