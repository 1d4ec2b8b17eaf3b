"""A retrieval, a use mark and a listing on one shard, on a read-pool thread: the statements
in order (``docs/storage.md``, "A retrieval"). A candidate that left active status since the
postings were read (a concurrent forget) is dropped and the candidates chosen again; a copy
whose change counter is not the one read with the rows answers nothing (``Searched.stale``).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import attrs

from scopemem.core import engine
from scopemem.core.records import Kind, Record
from scopemem.core.scopes import record_seq
from scopemem.stores.base import Hit
from scopemem.stores.shared import tokens
from scopemem.stores.shared.cache import DENSE_MIN_POSTINGS, ScopeCopy, Touches, dense_index
from scopemem.stores.sqlite_shared import index
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared import statements as st
from scopemem.stores.sqlite_shared.dialect import SQL
from scopemem.stores.sqlite_shared.usage import PendingUses

__all__ = ["ROWS_PER_STEM", "WHOLE_ROWS", "Searched", "copy_of", "listing", "mark_used", "search"]

#: A scope of at most this many active records is read whole, with its terms, in one
#: statement (``_whole_scope``): for the many small scopes, a third of what reading the
#: query's postings and then the candidates' rows costs.
WHOLE_ROWS = 64
#: So is a scope of at most this many active records a query stem: the token index costs
#: about 20 us a stem, reading a row with its terms about 5 us, and a 300-word brief has some
#: 175 stems (a 500-record scope: 4.4 ms of CPU read whole, 7.5 ms through the index).
ROWS_PER_STEM = 4


@attrs.frozen
class Searched:
    """A retrieval's answer and, when it read the postings itself, the change counter it
    read them at and how many (what ``PostingsCache.offer`` weighs); ``stale``: the copy
    it was given was out of date (and the answer was read from the shard)."""

    hits: list[Hit]
    generation: int | None = None
    postings_read: int = 0
    stale: bool = False


def search(conn: Any, uses: PendingUses, shard: int, ranking: engine.Ranking, scope_key: str,
           terms: engine.QueryTerms, limit: int, now: int, bump: bool,
           copy: ScopeCopy | None = None) -> Searched:
    """Steps 1 to 4; with ``copy`` (the scope's index held in memory, ``shared.cache``),
    step 1 is the copy's, and the first read of the candidates' rows also reads the scope's
    change counter: the copy answers only at its own, else the shard does."""
    touches: Any = None
    dense = None
    check: int | None = None
    generation: int | None = None
    postings: Mapping[str, Collection[int]]
    continues: AbstractSet[int]
    if copy is not None:
        active, continues = copy.active, copy.continues
        postings = engine.grouped(copy.terms(terms.stems), terms)
        touches, dense, check = copy.touches, copy.dense, copy.generation
        read = 0
    else:
        whole = _whole_scope(conn, uses, shard, ranking, scope_key, terms, limit, now, bump)
        if whole is not None:
            return whole
        params = {"scope": scope_key,
                  "terms": json.dumps([*terms.stems, index.CONTINUES], ensure_ascii=False)}
        state = conn.execute(st.STATE_POSTINGS, params).fetchall()
        if not state:
            return Searched([])
        active, generation = state[0][0], state[0][1]
        read_sets = {row[2]: set(json.loads(row[3])) for row in state
                     if row[3] is not None and row[3] != "[]"}
        continues = read_sets.pop(index.CONTINUES, set())
        postings = engine.grouped(read_sets, terms)
        read = sum(map(len, read_sets.values()))
    choice: tokens.Candidates[Sequence[Any]] = tokens.Candidates(
        postings, continues, terms, limit, ranking, active, now, touches=touches, dense=dense)
    while choice.wanted or check is not None:
        # The first read of a copy's candidates checks its change counter ("nothing" is
        # checked too).
        lead, found = uses.rows(conn, shard, scope_key, st.ACTIVE_ROWS_AT,
                                {"scope": scope_key, "seqs": json.dumps(choice.wanted)},
                                lead=2)
        if check is not None:
            if lead is None or lead[1] != check:
                stale = search(conn, uses, shard, ranking, scope_key, terms, limit, now, bump)
                return attrs.evolve(stale, stale=True)
            check = None
        # Rows, not records: only those ranked become records (``_whole_scope`` too).
        if choice.found({row[0]: (sqlite_sql.last_touched(row), row) for row in found}):
            break
    ranked = [(sqlite_sql.record(row), match) for row, match in choice.ranked()]
    return _hits(uses, shard, scope_key, ranked, now, bump, generation, read)


def _hits(uses: PendingUses, shard: int, scope_key: str, ranked: list[tuple[Record, float]],
          now: int, bump: bool, generation: int | None, read: int) -> Searched:
    """``ranked`` as a retrieval's answer, each record's use counted when ``bump``."""
    if not bump or not ranked:
        return Searched([Hit(record, match) for record, match in ranked], generation, read)
    uses.add(shard, scope_key, [record_seq(record.id) for record, _m in ranked], now)
    return Searched([Hit(engine.bump_usage(record, now), match) for record, match in ranked],
                    generation, read)


def _whole_scope(conn: Any, uses: PendingUses, shard: int, ranking: engine.Ranking,
                 scope_key: str, terms: engine.QueryTerms, limit: int, now: int, bump: bool
                 ) -> Searched | None:
    """A scope of at most ``WHOLE_ROWS`` active records, or ``ROWS_PER_STEM`` a query stem,
    ranked from all of them, read in one statement with their terms: their postings and
    the seqs continuing their predecessor's thread are taken from the rows. None for a
    larger scope: read from its postings."""
    most = max(WHOLE_ROWS, ROWS_PER_STEM * len(terms.stems))
    lead, rows = uses.rows(conn, shard, scope_key, st.SMALL_SCOPE_ROWS,
                           {"scope": scope_key, "most": most}, lead=3)
    if lead is None:
        return Searched([])  # no such scope
    _uses, generation, active = lead
    if active > most:
        return None
    asked = frozenset(terms.stems)
    postings: dict[str, set[int]] = {}
    threads: dict[int, str] = {}
    by_seq: dict[int, Sequence[Any]] = {}
    for row in rows:
        seq = row[0]
        threads[seq], by_seq[seq] = row[6], row
        for stem in asked.intersection(row[16].split()):
            holders = postings.get(stem)
            if holders is None:
                postings[stem] = {seq}
            else:
                holders.add(seq)
    # An active predecessor of the same thread: all the neighbour credit reads.
    continues = {seq for seq, thread in threads.items() if threads.get(seq - 1) == thread}
    choice: tokens.Candidates[Sequence[Any]] = tokens.Candidates(
        engine.grouped(postings, terms), continues, terms, limit, ranking, active, now,
        few=True)
    choice.found({seq: (sqlite_sql.last_touched(by_seq[seq]), by_seq[seq])
                  for seq in choice.wanted})
    ranked = [(sqlite_sql.record(row), match) for row, match in choice.ranked()]
    return _hits(uses, shard, scope_key, ranked, now, bump, generation,
                 sum(map(len, postings.values())))


def _postings(rows: Sequence[Sequence[Any]]) -> tuple[dict[str, set[int]], set[int]]:
    """``(term, seq)`` rows of the token index as term → seqs, and the seqs continuing their
    predecessor's thread (those under ``index.CONTINUES``)."""
    postings: dict[str, set[int]] = {}
    for term, seq in rows:
        holders = postings.get(term)
        if holders is None:
            holders = postings[term] = set()
        holders.add(seq)
    return postings, postings.pop(index.CONTINUES, set())


def copy_of(conn: Any, scope_key: str) -> ScopeCopy | None:
    """The scope's whole index as it is now, for a copy in memory; None for no scope."""
    with sqlite_sql.snapshot(conn):
        state = conn.execute(st.SCOPE_STATE, {"scope": scope_key}).fetchall()
        if not state:
            return None
        active, generation, sid = state[0]
        low, high = index.bounds(sid)
        rows = conn.execute(st.SCOPE_POSTINGS, {"low": low, "high": high}).fetchall()
        # Each row's last touch as saved: a lower bound ever after, as the weighing needs
        # (a use only moves it on).
        touches = Touches((seq, (touched, None)) for seq, touched in conn.execute(
            SQL.scope_touches, {"scope": scope_key}))
    postings, continuing = _postings(rows)
    size = sum(map(len, postings.values()))
    held: dict[str, Collection[int]]
    if size >= DENSE_MIN_POSTINGS:
        # Weighed as arrays, the copy never asks a term's seqs whether they hold one:
        # tuples of ints, which Python's collector stops walking after their first
        # collection, where the frozensets of a 10,000-record scope (200,000 seqs) made
        # each full collection walk them again.
        held = {term: tuple(sorted(seqs)) for term, seqs in postings.items()}
    else:
        held = {term: frozenset(seqs) for term, seqs in postings.items()}
    continues = frozenset(continuing)
    return ScopeCopy(generation, active, held, continues, size, touches,
                     dense_index(held, continues, size, touches.keys()))


def mark_used(conn: Any, uses: PendingUses, shard: int, scope_key: str, seqs: list[int],
              now: int) -> list[int]:
    """One use of each of ``seqs`` that is an active row: those seqs."""
    found = [seq for (seq,) in conn.execute(SQL.active_seqs, {
        "scope": scope_key, "seqs": json.dumps(seqs)}).fetchall()]
    if found:
        uses.add(shard, scope_key, found, now)
    return found


def listing(conn: Any, uses: PendingUses, shard: int, scope_key: str, limit: int,
            tokens_: list[str] | None, kind: Kind | None) -> list[Record]:
    """The newest active rows (holding one of ``tokens_``, of ``kind``, when given)."""
    _lead, rows = uses.rows(conn, shard, scope_key, st.LISTING, {
        "scope": scope_key, "limit": limit,
        "terms": None if tokens_ is None else json.dumps(tokens_, ensure_ascii=False),
        "kind": None if kind is None else str(kind)})
    return [sqlite_sql.record(row) for row in rows]
