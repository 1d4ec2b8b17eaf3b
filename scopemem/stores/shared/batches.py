"""Driving one write batch through the engine: no SQL, no connection, no dialect.

A SQL store hands ``plan_batch`` the scope's rows a batch can touch (read once, locked, in
the write's transaction): the active rows sharing a candidate's normalized text and the rows
its pointers name. The engine decides each candidate in order against the rows as the batch
has left them so far, and the answer is the batch's net effect (rows to insert, rows to
change, each once, the counts), persisted with a few statements whatever the batch's size.
``pick_eviction`` chooses what the cap retires from two short least-recently-used reads.
Both SQL stores' ``writes.py`` write through these.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

import attrs

from scopemem.core import engine
from scopemem.core.records import MAX_BATCH, MAX_SEQ, Candidate, Record, WriteCounts
from scopemem.core.scopes import memory_id
from scopemem.core.text import normalize_text
from scopemem.errors import StoreError

__all__ = ["PURGE_ROWS", "BatchPlan", "lookup_keys", "pick_eviction", "plan_batch",
           "seq_in_scope", "seqs_in_scope"]

# The most dead rows past the retention one write transaction purges: twice what a full
# batch can retire (a supersede and an eviction per candidate), so the purge keeps up with
# any steady stream of writes and a backlog (after an upgrade, a long pause, a cap lowered)
# drains over the next writes instead of in one long transaction.
PURGE_ROWS = 2 * 2 * MAX_BATCH


def seq_in_scope(scope_key: str, record_id: object) -> int | None:
    """The seq of ``record_id`` when it is exactly an id this scope mints
    (``mem:<scope>:<seq>``), else None (another scope's, malformed, not a string)."""
    prefix = f"mem:{scope_key}:"
    if not isinstance(record_id, str) or not record_id.startswith(prefix):
        return None
    digits = record_id[len(prefix):]
    if not digits.isascii() or not digits.isdigit() or len(digits) > 18:
        return None
    seq = int(digits)
    return seq if memory_id(scope_key, seq) == record_id else None


def seqs_in_scope(scope_key: str, ids: Iterable[object]) -> list[int]:
    """The seqs of those of ``ids`` that are the scope's (``seq_in_scope``), in their order."""
    return [seq for seq in map(functools.partial(seq_in_scope, scope_key), ids)
            if seq is not None]


def lookup_keys(scope_key: str, candidates: Sequence[Candidate]
                ) -> tuple[list[str], list[int]]:
    """What a store reads for a batch: the candidates' normalized texts (the active rows
    holding one of them) and the seqs their pointers name in this scope."""
    norms = sorted({normalize_text(candidate.text) for candidate in candidates})
    seqs = sorted({seq for candidate in candidates
                   for pointer in (candidate.restates, candidate.supersedes) if pointer
                   for seq in (seq_in_scope(scope_key, pointer),) if seq is not None})
    return norms, seqs


@attrs.frozen
class BatchPlan:
    """A batch's net effect. ``inserts``: the new records in seq order, each as the batch
    left it (a later candidate may have bumped or superseded it). ``changes``: the existing
    rows the batch changed, each once in its final state (a status other than active means
    it was retired now). ``live_delta``: how the scope's active count moved."""

    counts: WriteCounts
    inserts: list[Record]
    changes: list[Record]
    next_seq: int
    live_delta: int


def plan_batch(scope_key: str, candidates: Sequence[Candidate], known: Iterable[Record],
               first_seq: int, now: int) -> BatchPlan:
    """Apply ``engine.plan_write`` to each candidate in order. ``known`` must hold at least
    the scope's active rows whose normalized text is a candidate's and the rows the
    candidates' pointers name (``lookup_keys``); ``first_seq`` is the next seq to mint.
    ``StoreError`` when the batch would mint a seq past ``MAX_SEQ`` (every store's last)."""
    rows: dict[int, Record] = {}  # seq -> the row as the batch has left it
    by_norm: dict[str, list[int]] = {}  # normalized text -> the seqs of the rows holding it
    for record in known:
        seq = seq_in_scope(scope_key, record.id)
        if seq is not None:
            rows[seq] = record
            by_norm.setdefault(normalize_text(record.text), []).append(seq)
    existing = set(rows)
    changed: set[int] = set()
    seq = first_seq
    counted: list[WriteCounts] = []
    live_delta = 0
    for candidate in candidates:
        norm = normalize_text(candidate.text)
        # The rows sharing the candidate's text and those its pointers name (every row's
        # id is this scope's ``mem:<scope>:<seq>``), earliest first.
        named = {number for pointer in (candidate.restates, candidate.supersedes) if pointer
                 for number in (seq_in_scope(scope_key, pointer),) if number in rows}
        same = [number for number in by_norm.get(norm, ()) if rows[number].is_active]
        pool = [rows[number] for number in sorted(named.union(same))]
        action = engine.plan_write(scope_key, candidate, pool, now)
        counted.append(engine.count_action(action, candidate))
        if isinstance(action, engine.Insert):
            if action.superseded is not None:
                retired = seq_in_scope(scope_key, action.superseded.id)
                if retired is not None:
                    rows[retired] = action.superseded
                    changed.add(retired)
                    live_delta -= 1
            rows[seq] = engine.mint_record(scope_key, seq, candidate, now)
            by_norm.setdefault(norm, []).append(seq)
            seq += 1
            live_delta += 1
        else:
            number = seq_in_scope(scope_key, action.updated.id)
            if number is not None:
                rows[number] = action.updated
                changed.add(number)
    if seq - 1 > MAX_SEQ:  # an id past it is no memory id: no forget or import names it
        raise StoreError(f"store: scope {scope_key!r} has used every id")
    return BatchPlan(
        counts=WriteCounts.total(counted),
        inserts=[rows[number] for number in range(first_seq, seq)],
        changes=[rows[number] for number in sorted(changed & existing)],
        next_seq=seq,
        live_delta=live_delta,
    )


def pick_eviction(never_used: Iterable[tuple[int, int | None, int]],
                  used: Iterable[tuple[int, int | None, int]], excess: int) -> list[int]:
    """The seqs of the ``excess`` records the engine evicts (``engine.evicted_seqs``).

    The engine retires the least recently used first: last use, else creation, then
    creation, then seq. Within the never-used rows that order is (creation, seq); within the
    used ones (last use, creation, seq); so the ``excess`` first rows overall are among the
    ``excess`` first of each group. The store reads those two short lists (active rows in
    those orders, ``excess`` each, as (seq, last use, creation): no whole rows) and the
    engine chooses among them."""
    return engine.evicted_seqs([*never_used, *used], excess)
