"""A retrieval, a use mark and a listing on one shard: the statements, in order.

They run on the read pool, on the thread's own connection to the scope's shard.

1. In one statement, the scope's active count and the postings of the query's terms from
   the shard's token index (``statements.STATE_POSTINGS``, ``index.py``);
2. ``tokens.term_weights``, ``tokens.covered`` and ``engine.rank_candidates``: the weights,
   the covered weight of each record the answer can need (``core.topk``) and the best
   ``candidate_cap(limit)``, with the very functions every other store ranks with;
3. the candidates' rows with the uses not saved yet applied (``usage.py``), and
   ``engine.score_candidates``: the answer. A candidate that left active status since
   step 1 (a concurrent forget) leaves the postings, and the candidates are chosen again
   without it;
4. one use of each record returned, pending until the next save.

A scope of at most ``WHOLE_ROWS`` active records skips steps 1 to 3: its every active row is
read with its terms in one statement and ranked by ``engine.rank_entries``, as the
in-process store ranks (``_small_scope``).

A scope read often enough has its whole index copied into memory (``PostingsCache`` and
``ScopeCopy``, shared with the PostgreSQL store, ``shared/cache.py``): step 1 is then the copy's,
weighed as arrays (``stores.dense``), and the read of step 3 also reads the scope's change
counter (``scopes.generation``, moved on by every transaction changing the scope, in any
process); a copy at another counter answers nothing and is dropped. The store's own writes
carry the copy across (``copies.py``).
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
from scopemem.stores.sqlite_shared.copies import RowCopy, answer
from scopemem.stores.sqlite_shared.usage import PendingUses

__all__ = ["WHOLE_ROWS", "Searched", "copy_of", "listing", "mark_used", "search"]

#: A scope of at most this many active records is copied whole by the retrieval that finds it
#: not copied (while the copies have room to spare): reading its whole index costs little
#: more than reading the query's postings, and its later retrievals are answered from memory.
WHOLE_ROWS = 64


@attrs.frozen
class Searched:
    """A retrieval's answer (None: the copy it was given is out of date, nothing counted),
    and, when it read the postings itself, the change counter it read them at and how many
    (what ``PostingsCache.offer`` weighs)."""

    hits: list[Hit] | None
    generation: int | None = None
    postings_read: int = 0
    added: int = 0  # the number of the add counting its uses (0: none)
    # The scope copied whole, when it was asked to and small enough (``WHOLE_ROWS``).
    made: tuple[ScopeCopy, RowCopy] | None = None


def search(conn: Any, uses: PendingUses, shard: int, ranking: engine.Ranking, scope_key: str,
           terms: engine.QueryTerms, limit: int, now: int, bump: bool,
           copy: ScopeCopy | None = None, whole: bool = False) -> Searched:
    """Steps 1 to 4; with ``copy`` (the scope's index held in memory, ``shared.cache``),
    step 1 is the copy's, and the first read of the candidates' rows also reads the scope's
    change counter: the copy answers only at its own. With ``whole``, a scope of at most
    ``WHOLE_ROWS`` active records is copied whole instead (``copy_of``) and answered from
    the copies, which come back with the answer."""
    touches: Any = None
    dense = None
    check: int | None = None
    generation: int | None = None
    postings: Mapping[str, Collection[int]]
    continues: AbstractSet[int]
    if copy is not None:
        active, postings, continues = copy.active, copy.terms(terms.terms), copy.continues
        touches, dense, check = copy.touches, copy.dense, copy.generation
        read = 0
    else:
        small = _small_scope(conn, uses, shard, ranking, scope_key, terms, limit, now, bump,
                             whole)
        if small is not None:
            return small
        params = {"scope": scope_key,
                  "terms": json.dumps([*terms.terms, index.CONTINUES], ensure_ascii=False)}
        state = conn.execute(st.STATE_POSTINGS, params).fetchall()
        if not state:
            return Searched([])
        active, generation = state[0][0], state[0][1]
        rows = [row[2:] for row in state if row[2] is not None]
        postings, continues = _postings(rows)
        read = len(rows) - len(continues)
    weights = tokens.term_weights(postings, active, terms, ranking)
    total = sum(weights)
    details: dict[int, tuple[int, Record]] = {}
    gone: set[int] = set()
    while True:
        if dense is not None and not gone:
            covered = dense.covered(terms, weights, limit, ranking.context_weight)
        else:
            covered = tokens.covered(postings, continues, terms, weights, limit, ranking,
                                     touches, now)
        candidates = engine.rank_candidates(covered, total, limit, ranking, continues)
        wanted = [seq for _match, seq in candidates if seq not in details]
        if not wanted and check is None:
            break
        # The first read of a copy's candidates checks its change counter ("nothing" is
        # checked too).
        lead, found = uses.rows(conn, shard, scope_key, st.ACTIVE_ROWS_AT,
                                {"scope": scope_key, "seqs": json.dumps(wanted)}, lead=2)
        if check is not None:
            if lead is None or lead[1] != check:
                return Searched(None)
            check = None
        for row in found:
            record = sqlite_sql.record(row)
            details[row[0]] = (record.last_touched, record)
        gone = {seq for seq in wanted if seq not in details}
        if not gone:
            break
        # Rows that left active status since the postings were read (a concurrent forget)
        # leave them (new sets: a copy is shared), so the weighing can reach past them.
        postings = {term: frozenset(holders).difference(gone)
                    for term, holders in postings.items()}
    if not candidates:
        return Searched([], generation, read)
    ranked = engine.score_candidates(candidates, limit, now, details)
    if not bump:
        return Searched([Hit(record, match) for record, match in ranked], generation, read)
    added = uses.add(shard, scope_key, [record_seq(record.id) for record, _m in ranked], now)
    return Searched([Hit(engine.bump_usage(record, now), match) for record, match in ranked],
                    generation, read, added)


def _small_scope(conn: Any, uses: PendingUses, shard: int, ranking: engine.Ranking,
                 scope_key: str, terms: engine.QueryTerms, limit: int, now: int, bump: bool,
                 whole: bool) -> Searched | None:
    """A scope of at most ``WHOLE_ROWS`` active records ranked from all of them, read in one
    statement with their terms (``engine.rank_entries``, as the in-process store ranks):
    about a third of what reading the query's postings and then the candidates' rows costs
    SQLite, for the many small scopes no copy holds. With ``whole``, it is copied instead
    (``copy_of``). None for a larger scope (or a copy that could not be made): read from
    its postings."""
    # Copied whole, it is read again with its index: only its counts here.
    lead, rows = uses.rows(conn, shard, scope_key, st.SMALL_SCOPE_ROWS,
                           {"scope": scope_key, "most": -1 if whole else WHOLE_ROWS}, lead=3)
    if lead is None:
        return Searched([])  # no such scope
    _uses, generation, active = lead
    if active > WHOLE_ROWS:
        return None
    if whole:
        made = copy_of(conn, uses, shard, scope_key)
        if made is None:  # a commit came between the two reads: from the postings
            return None
        return _from_copies(conn, uses, shard, ranking, scope_key, terms, limit, now, bump,
                            made)
    # Shaped as ``engine.rank_entries`` reads them: seq, terms, thread, last touch, row.
    entries = [(row[0], frozenset(row[16].split()), row[6],
                row[8] if row[9] is None else row[9], row) for row in rows]
    ranked = engine.rank_entries(entries, terms,
                                 engine.scope_stats(terms, (entry[1] for entry in entries)),
                                 limit, now, ranking)
    records = [(sqlite_sql.record(row), match) for row, match in ranked]
    # The postings the query's terms hold, as reading them would have counted them (what
    # ``PostingsCache.offer`` weighs).
    asked = frozenset(terms.terms)
    read = sum(len(asked & entry[1]) for entry in entries)
    if not bump or not records:
        return Searched([Hit(record, match) for record, match in records], generation, read)
    added = uses.add(shard, scope_key, [record_seq(record.id) for record, _m in records], now)
    return Searched([Hit(engine.bump_usage(record, now), match) for record, match in records],
                    generation, read, added)


def _from_copies(conn: Any, uses: PendingUses, shard: int, ranking: engine.Ranking,
                 scope_key: str, terms: engine.QueryTerms, limit: int, now: int, bump: bool,
                 made: tuple[ScopeCopy, RowCopy]) -> Searched:
    """The answer from copies just made, as the event loop gives it from them."""
    copy, rows = made
    ranked = answer(copy, rows, ranking, terms, limit, now)
    if ranked is None:  # too heavy for the loop: never for a scope this small, but exact
        return search(conn, uses, shard, ranking, scope_key, terms, limit, now, bump, copy)
    if not bump or not ranked:
        return Searched([Hit(record, match) for record, match in ranked], copy.generation,
                        made=made)
    added = uses.add(shard, scope_key, [record_seq(record.id) for record, _m in ranked], now)
    return Searched([Hit(engine.bump_usage(record, now), match) for record, match in ranked],
                    copy.generation, added=added, made=made)


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


def copy_of(conn: Any, uses: PendingUses, shard: int, scope_key: str
            ) -> tuple[ScopeCopy, RowCopy] | None:
    """The scope's whole index and active rows as they are now, for a copy in memory; None
    for no scope."""
    with sqlite_sql.snapshot(conn):
        # The rows first: their read begins the snapshot, as ``rows_marked`` needs to know
        # which uses it holds; the index is read in the same snapshot after them.
        lead, full, mark = uses.rows_marked(conn, shard, scope_key, st.ACTIVE_ROWS_ALL,
                                            {"scope": scope_key}, lead=2)
        state = conn.execute(st.SCOPE_STATE, {"scope": scope_key}).fetchall()
        if not state or lead is None:
            return None
        low, high = index.bounds(state[0][2])
        rows = conn.execute(st.SCOPE_POSTINGS, {"low": low, "high": high}).fetchall()
    active, generation, _sid = state[0]
    if lead[1] != generation:  # one snapshot: never, but a copy must be of one state
        return None
    postings, continuing = _postings(rows)
    size = sum(map(len, postings.values()))
    held: dict[str, Collection[int]]
    if size >= DENSE_MIN_POSTINGS:
        # Weighed as arrays, the copy never asks a term's seqs whether they hold one (its
        # carries' layers take tuples as a fold makes them): tuples of ints, which Python's
        # collector stops walking after their first collection, where the frozensets of a
        # 10,000-record scope (200,000 seqs) made each full collection walk them again
        # (a full collection of the process: 72 ms with them, 42-61 without).
        held = {term: tuple(sorted(seqs)) for term, seqs in postings.items()}
    else:
        held = {term: frozenset(seqs) for term, seqs in postings.items()}
    continues = frozenset(continuing)
    records = {row[0]: sqlite_sql.record(row) for row in full}
    # Each row's last touch with the uses not saved yet: a lower bound ever after, as the
    # weighing needs (a use only moves it on).
    touches = Touches({seq: (record.last_touched, None) for seq, record in records.items()})
    copy = ScopeCopy(generation, active, held, continues, size, touches,
                     dense_index(held, continues, size, records.keys()))
    return copy, RowCopy(generation, records, mark)


def mark_used(conn: Any, uses: PendingUses, shard: int, scope_key: str, seqs: list[int],
              now: int) -> tuple[list[int], int]:
    """One use of each of ``seqs`` that is an active row: those seqs, and the add's number
    (0: none)."""
    found = [seq for (seq,) in conn.execute(st.ACTIVE_SEQS, {
        "scope": scope_key, "seqs": json.dumps(seqs)}).fetchall()]
    return found, uses.add(shard, scope_key, found, now) if found else 0


def listing(conn: Any, uses: PendingUses, shard: int, scope_key: str, limit: int,
            tokens_: list[str] | None, kind: Kind | None) -> list[Record]:
    """The newest active rows (holding one of ``tokens_``, of ``kind``, when given)."""
    _lead, rows = uses.rows(conn, shard, scope_key, st.LISTING, {
        "scope": scope_key, "limit": limit,
        "terms": None if tokens_ is None else json.dumps(tokens_, ensure_ascii=False),
        "kind": None if kind is None else str(kind)})
    return [sqlite_sql.record(row) for row in rows]
