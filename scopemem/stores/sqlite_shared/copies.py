"""A scope's copies in memory: its records beside its index, answers from them on the
event loop (``RowCopy``, ``answer``), and carrying both across this store's own write.

A write changes a scope's change counter, so the copy read before it (``shared.cache``'s
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

import itertools
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from scopemem.core import engine
from scopemem.core.records import Record, with_uses
from scopemem.core.scopes import record_seq
from scopemem.stores.shared import cache, tokens
from scopemem.stores.shared.cache import PostingsCache, ScopeCopy, Touches, dense_index
from scopemem.stores.sqlite_shared.writes import Change

if TYPE_CHECKING:
    from scopemem.stores.dense import DenseIndex

__all__ = ["FOLD_SHARE", "LOOP_POSTINGS", "Layered", "RowCopy", "answer", "carried", "carried_rows",
           "carry", "fold_due", "with_folded"]

#: Uses kept apart per row of a ``RowCopy`` before they are folded into the records (or, with
#: no moment to fold them, both copies dropped at sixteen times as many): a bound on what a
#: long-lived copy holds besides its rows.
MAX_KEPT_USES = 64
#: A query whose terms hold more postings than this is not weighed on the event loop.
LOOP_POSTINGS = 20_000
#: A carried copy's postings are folded into a plain dict once the writes layered over them
#: (``Layered``) add or take out more than one in this many of them: as many as it holds.
#: A fold of a 10,000-record scope costs 45-55 ms holding the GIL on its thread, and every
#: write's Python waits on it: folding at an eighth made the writes at the cap 25% slower
#: on the mean (a fold about every 25 writes) and set their p99. Folding later costs a
#: term read from the layers more (its holders are the base's, the layers' and the gone
#: seqs worked out), but a retrieval asks for few terms, and the first retrieval after a
#: write cost the same (figure 3 of ``benchmarks/load_bench.py``).
FOLD_SHARE = 1
#: ... and folded at once by the write that carries them past this many times that share.
FOLD_NOW = 3
#: Writes whose additions a ``Layered`` keeps as they came before gathering them per term.
RECENT_LAYERS = 8

_NONE: frozenset[int] = frozenset()
#: The seqs a write posted under a term (``writes.Change.posted``).
Seqs = tuple[int, ...]


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

    def hold(self, seqs: Sequence[int], records: Sequence[Record], mark: int) -> None:
        """``fold``, with nothing kept apart, and ``records`` (records ``seqs`` of this copy
        with one use more, the only uses numbered since their mark) in place of theirs."""
        assert not self.uses
        self.records.update(zip(seqs, records, strict=True))
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
    records replace theirs, holding the uses numbered up to its mark.

    The new copy takes over the records of ``rows`` rather than copying them (10,000 of
    them for a large scope, each write), and ``rows`` is left empty at no counter: the
    store holds one ``RowCopy`` per scope and drops the old one as it carries it, so a
    caller still holding it finds no record in it and reads through SQL."""
    new = RowCopy(change.before + 1, rows.records, rows.mark)
    new.marks, new.uses, new.kept, new._built = rows.marks, rows.uses, rows.kept, rows._built
    rows.generation, rows.records, rows.marks, rows.uses, rows._built = -1, {}, {}, {}, {}
    for record in change.rows:
        seq = record_seq(record.id)
        new.records[seq] = record
        new.marks[seq] = change.mark
        new._built.pop(seq, None)
    # Then the rows it retired, those it inserted and evicted again among them.
    for seq in change.retired:
        new.records.pop(seq, None)
        new.marks.pop(seq, None)
        new.uses.pop(seq, None)
        new._built.pop(seq, None)
    return new


def carry(cache: PostingsCache, scope_key: str, change: Change) -> ScopeCopy | None:
    """Replace the scope's copy by the one ``change`` leaves, when the copy held is at the
    counter the change began at; the copy carried, or None."""
    copy = cache.latest(scope_key)
    if copy is None or copy.generation != change.before:
        return None
    moved = carried(copy, change)
    return moved if cache.replace(scope_key, copy.generation, moved) else None


def fold_due(copy: ScopeCopy) -> Layered | None:
    """The copy's layered postings, when they are due to be folded."""
    postings = copy.postings
    return postings if isinstance(postings, Layered) and postings.due(copy.size) else None


def with_folded(held: ScopeCopy, done: Layered, folded: dict[str, Seqs]
                ) -> ScopeCopy | None:
    """``held`` (the copy held now) with ``folded`` (``done`` folded) under its postings:
    in their place if they are ``done``, else beneath its later layers; None when
    ``held`` is layered over another base."""
    postings: Mapping[str, Collection[int]] | None = None
    if held.postings is done:
        postings = folded
    elif isinstance(held.postings, Layered):
        postings = held.postings.rebased(done, folded)
    if postings is None:
        return None
    return attrs.evolve(held, postings=postings)


def carried(copy: ScopeCopy, change: Change) -> ScopeCopy:
    """``copy`` with ``change`` applied, at the counter after it."""
    inserted = set(change.inserted)
    retired = set(change.retired).union(change.unposted)
    size = copy.size + change.postings_added - change.postings_removed
    postings = Layered.after(copy.postings, size, change.posted, change.postings_added,
                             retired)
    continuing = set(change.continuing) - retired
    continues = (copy.continues | continuing) - retired
    # Weighed as arrays, the copy reads no touches (only a retrieval that met a forget
    # does, and then as lower bounds: a seq missing reads as touched at 0, the oldest, and
    # a retired one is never weighed), so they are shared as they are.
    touches = copy.touches
    dense: DenseIndex | None = None
    if copy.dense is not None and size >= cache.DENSE_MIN_POSTINGS:
        dense = copy.dense.after(postings, inserted - retired, retired, continuing)
    if dense is None:
        dense = dense_index(postings, continues, size)
        touches = Touches(copy.touches)
        touches.update((seq, (touched, None)) for seq, touched in change.touched)
        for seq in retired:
            touches.pop(seq, None)
    return ScopeCopy(change.before + 1, change.active, postings, continues, size, touches,
                     dense)


class Layered(Mapping[str, frozenset[int]]):
    """A copy's postings as those of a copy some writes ago (``base``) with the postings
    those writes added and without the records they retired (``gone``; a seq is never
    active again once retired, nor reused), each term's holders worked out the first time
    it is asked for.

    The writes' additions are the last few writes' own, as they came (``recent``, at most
    ``RECENT_LAYERS``), over the earlier ones gathered per term, ``RECENT_LAYERS`` writes to
    a chunk (``merged``, oldest first): carrying a copy across a write then costs what the
    write changed, and the gathering, once every few writes, what those writes changed
    together (when a gathering joined them into the earlier writes' terms, it re-joined
    every term's seqs since the base: 6-9 ms on a 10,000-record scope). Making each
    term's set anew every write would cost every posting of the terms it touched, and a
    batch of realistic text touches the scope's most common terms: a few hundred thousand
    postings of a 10,000-record scope.
    Once the layers hold one in ``FOLD_SHARE`` of the postings (``due``), the store folds
    them into a plain dict on a thread (``folded``, then ``rebased`` under the writes
    carried meanwhile), so a term is seldom worked out from more than that."""

    __slots__ = ("_resolved", "base", "gone", "layered", "merged", "recent")

    def __init__(self, base: Mapping[str, Collection[int]],
                 merged: tuple[Mapping[str, Seqs], ...],
                 recent: tuple[Mapping[str, Seqs], ...], gone: frozenset[int],
                 layered: int) -> None:
        self.base = base
        self.merged = merged
        self.recent = recent
        self.gone = gone
        self.layered = layered  # postings added and seqs gone since ``base``
        self._resolved: dict[str, frozenset[int]] = {}

    @classmethod
    def after(cls, postings: Mapping[str, Collection[int]], size: int,
              added: Mapping[str, Seqs], posted: int, retired: set[int]
              ) -> Mapping[str, Collection[int]]:
        """``postings`` (``size`` of them) with ``added`` (``posted`` postings, kept as
        they are: never changed after) and without ``retired``: layered, or a plain dict
        once the layers hold more than their share."""
        merged: tuple[Mapping[str, Seqs], ...]
        if isinstance(postings, Layered):
            base, merged, recent = postings.base, postings.merged, postings.recent
            gone, layered = postings.gone | retired, postings.layered
        else:
            base, merged, recent, gone, layered = postings, (), (), frozenset(retired), 0
        recent = (*recent, added)
        if len(recent) > RECENT_LAYERS:
            merged, recent = (*merged, _gathered(recent)), ()
        layered += posted + len(retired)
        after = cls(base, merged, recent, gone, layered)
        # Folded in the background once due (``due``; the store's ``_fold``), here only if
        # writes keep coming faster than a fold can land.
        return after.folded() if layered * FOLD_SHARE > FOLD_NOW * size else after

    def due(self, size: int) -> bool:
        """Whether the layers hold enough (of ``size`` postings) to be folded."""
        return self.layered * FOLD_SHARE > size

    def rebased(self, done: Layered, folded: dict[str, Seqs]) -> Layered | None:
        """These postings over ``folded`` (what ``done``, an earlier state of these same
        layers, folds into): the layers since ``done`` alone. None when ``done`` is not
        layered over the same base.

        Layers only grow (a term's posted seqs and the retired seqs are unions), and a
        retired seq never comes back, so what ``done`` posted is in ``folded`` or retired
        since, and what it retired is out of ``folded``: taking both out of these layers
        changes no term's holders."""
        if done.base is not self.base:
            return None
        chunks = len(done.merged)
        if len(self.merged) < chunks or any(
                mine is not theirs
                for mine, theirs in zip(self.merged[:chunks], done.merged, strict=True)):
            return None
        merged: tuple[Mapping[str, Seqs], ...] = ()
        if len(self.merged) == chunks:  # not gathered since: the later writes' own
            held = len(done.recent)
            if len(self.recent) < held or any(
                    mine is not theirs
                    for mine, theirs in zip(self.recent[:held], done.recent, strict=True)):
                return None
            recent = self.recent[held:]
        else:  # gathered since: the first new chunk holds ``done``'s recent layers too
            first: dict[str, Seqs] = {}
            for term, seqs in self.merged[chunks].items():
                before = done._added(term)
                more = tuple(seq for seq in seqs if seq not in before) if before else seqs
                if more:
                    first[term] = more
            merged = (first, *self.merged[chunks + 1:])
            recent = self.recent
        gone = self.gone - done.gone
        layered = len(gone) + sum(
            len(seqs) for layer in (*merged, *recent) for seqs in layer.values())
        return Layered(folded, merged, recent, gone, layered)

    def folded(self) -> dict[str, Seqs]:
        """Every term's holders, as a plain dict of tuples (``_folded``)."""
        return _folded((self.base, *self.merged, *self.recent), self.gone)

    def _terms(self) -> set[str]:
        terms = set(self.base)
        for layer in (*self.merged, *self.recent):
            terms.update(layer)
        return terms

    def _parts(self, term: str) -> list[Seqs]:
        """The sets of seqs the layers posted under ``term``."""
        return [layer[term] for layer in (*self.recent, *self.merged) if term in layer]

    def _added(self, term: str) -> frozenset[int]:
        """The seqs the layers posted under ``term``."""
        parts = self._parts(term)
        return _NONE.union(*parts) if parts else _NONE

    def __getitem__(self, term: str) -> frozenset[int]:
        held = self._holders(term)
        if not held:
            raise KeyError(term)
        return held

    def _holders(self, term: str) -> frozenset[int]:
        """The term's holders (empty when none), worked out once."""
        held = self._resolved.get(term)
        if held is None:
            held = self._resolved[term] = self._work_out(term)
        return held

    def _work_out(self, term: str) -> frozenset[int]:
        """The term's holders: the base's (a frozenset, or a fold's tuple) with the layers'
        and without the seqs gone."""
        base = self.base.get(term)
        parts = self._parts(term)
        if isinstance(base, frozenset) and not parts:
            held = base
        else:
            held = _NONE.union(base or (), *parts)
        if held and not self.gone.isdisjoint(held):
            held = held - self.gone
        return held

    def __contains__(self, term: object) -> bool:
        return isinstance(term, str) and bool(self._holders(term))

    def __iter__(self) -> Iterator[str]:
        return iter([term for term in self._terms() if term in self])

    def __len__(self) -> int:
        return sum(1 for _term in self)


def _folded(parts: Sequence[Mapping[str, Collection[int]]], gone: frozenset[int]
            ) -> dict[str, Seqs]:
    """Each term's seqs in any of ``parts`` but ``gone``, as a dict of tuples.

    As arrays: every posting of every part in one array of ``term number << 32 | seq``
    (a seq fits in 32 bits, ``index.MAX_SEQ``), the gone ones masked out, sorted (which also
    groups each term's seqs, and makes a seq posted twice adjacent, so it is kept once),
    then cut per term. A fold of a 10,000-record scope's layers worked term by term with
    sets took 90 ms holding the GIL (18,000 terms); numpy sorts and masks without it.
    Tuples, not frozensets: Python's collector stops walking a tuple of ints after its
    first collection, where tens of thousands of frozensets set off a full collection."""
    import numpy as np  # only a fold pays for it, not a process that never folds

    number: dict[str, int] = {}
    keys: list[Any] = []
    for part in parts:
        if not part:
            continue
        terms = list(part)
        ids = np.fromiter((number.setdefault(term, len(number)) for term in terms),
                          dtype=np.int64, count=len(terms))
        held = list(part.values())
        sizes = np.fromiter(map(len, held), dtype=np.int64, count=len(held))
        seqs = np.fromiter(itertools.chain.from_iterable(held), dtype=np.int64,
                           count=int(sizes.sum()))
        keys.append(np.repeat(ids << 32, sizes) | seqs)
    if not keys:
        return {}
    merged = np.concatenate(keys)
    if gone:
        wanted = np.fromiter(gone, dtype=np.int64, count=len(gone))
        merged = merged[~np.isin(merged & 0xFFFFFFFF, wanted)]
    merged.sort()
    if len(merged) > 1:
        merged = merged[np.concatenate(([True], merged[1:] != merged[:-1]))]
    ids = merged >> 32
    starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
    ends = [*starts[1:].tolist(), len(merged)]
    seqs_all = (merged & 0xFFFFFFFF).tolist()
    names = list(number)
    return {names[term]: tuple(seqs_all[start:end])
            for term, start, end in zip(ids[starts].tolist(), starts.tolist(), ends,
                                        strict=True)}


def _gathered(layers: Sequence[Mapping[str, Seqs]]) -> dict[str, Seqs]:
    """``layers`` as one, term by term (a new dict). A seq is posted once (seqs are never
    reused), so the layers' tuples are joined as they are."""
    parts: dict[str, list[Seqs]] = {}
    for layer in layers:
        for term, seqs in layer.items():
            parts.setdefault(term, []).append(seqs)
    return {term: more[0] if len(more) == 1 else tuple(itertools.chain(*more))
            for term, more in parts.items()}
