"""The transactions that change a scope, written once for both SQL stores over a ``Tx``.

Each function runs inside a transaction its store opened, on a ``Tx``: the shared
statements (``shared.sql``) and the few steps each database takes its own way (locking the
scope's row, binding rows, the token index). The PostgreSQL store awaits them; the SQLite
store's ``Tx`` never suspends, so its writing thread runs them with ``run_sync``.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from scopemem.core import engine
from scopemem.core.records import (
    Candidate,
    CountRow,
    PurgeResult,
    Record,
    Status,
    SweepResult,
    WriteCounts,
)
from scopemem.core.scopes import memory_id, record_seq
from scopemem.core.words import Analyzer
from scopemem.stores.porting import import_threads
from scopemem.stores.shared import batches
from scopemem.stores.shared import counts as counting
from scopemem.stores.shared.sql import Statements, scrubbed_sources
from scopemem.stores.shared.tokens import documents, record_tokens

__all__ = ["ALL_ROWS", "Locked", "Tx", "delete_scope", "forget", "import_scope", "purge",
           "run_sync", "scrub_provenance", "sweep", "write"]

T = TypeVar("T")
Params = dict[str, Any]
Row = Sequence[Any]
Locked = tuple[int, int, str | None, int | None]
#: A purge's ``rows`` when it takes every due row (a ``LIMIT`` both databases take).
ALL_ROWS = 2**62


class Tx(Protocol):
    """One transaction on one scope (``scope``): the statements' calls, and the steps each
    database takes its own way (the token index, a list's binding, the scope's lock)."""

    @property
    def sql(self) -> Statements: ...
    @property
    def scope(self) -> str: ...
    def ints(self, values: Sequence[int]) -> object: ...  # a list bound as a value
    # The scope's row taken (made when ``create``): last seq, active count, the thread of
    # its last row and its newest record's creation time; None: no row.
    async def lock(self, now: int, create: bool) -> Locked | None: ...
    async def rows(self, statement: str, params: Params) -> list[Any]: ...
    # Several reads' rows, waited for once where the database can.
    async def rows_of(self, *queries: tuple[str, Params]) -> list[list[Any]]: ...
    async def records(self, statement: str, params: Params) -> list[Record]: ...
    async def run(self, statement: str, params: Params) -> None: ...
    async def count(self, statement: str, params: Params) -> int: ...  # rows changed
    async def many(self, statement: str, rows: Sequence[Sequence[Any]]) -> None: ...
    # The active rows of these normalized texts and the rows ``seqs``, locked.
    async def known(self, norms: list[str], seqs: list[int]) -> list[Record]: ...
    # New rows (seq, record, its tokens), retired ``now`` when not active.
    async def insert(self, rows: Sequence[tuple[int, Record, list[str]]], now: int) -> None: ...
    async def change(self, rows: Sequence[Record], now: int) -> None: ...
    # In and out of the token index: (seq, terms, whether it continues its thread); out
    # while the rows still hold their tokens; existing rows continuing a thread now.
    async def post(self, posted: Sequence[tuple[int, list[str], bool]]) -> None: ...
    async def unpost(self, seqs: Sequence[int]) -> None: ...
    async def follow(self, seqs: Sequence[int], beside: Mapping[int, Row]) -> None: ...
    # ``sql.forget`` and the row out of the index; the scope's index and counters gone.
    async def forget(self, params: Params) -> bool: ...
    async def drop(self) -> None: ...
    async def counters(self, rows: Sequence[CountRow]) -> None: ...


def run_sync(steps: Coroutine[Any, Any, T]) -> T:
    """Run ``steps`` on a ``Tx`` that never suspends."""
    try:
        steps.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    steps.close()
    raise RuntimeError("a synchronous transaction suspended")


async def write(tx: Tx, analyzer: Analyzer, fitted: Sequence[Candidate], cap: int, now: int,
                cutoff: int) -> WriteCounts:
    """Write a fitted batch (``batches.plan_batch``), evict past ``cap``, purge past
    ``cutoff``; the counts."""
    sql, scope = tx.sql, tx.scope
    locked = await tx.lock(now, True)
    assert locked is not None
    last_seq, active, thread, last_write = locked
    # A write that read its clock before another process's write to the scope committed is
    # still the newer record: never older than the scope's newest (the eviction's order,
    # creation time then seq, stays the commit order).
    now = max(now, last_write or 0)
    plan = batches.plan_batch(scope, fitted, await tx.known(*batches.lookup_keys(scope, fitted)),
                              last_seq + 1, now)
    if plan.inserts:
        held = {record_seq(r.id): record_tokens(r, analyzer) for r in plan.inserts}
        await tx.insert([(seq, r, held[seq]) for r in plan.inserts
                         for seq in (record_seq(r.id),)], now)
        await tx.post(documents(plan.inserts, thread, held))
    if plan.changes:
        await tx.change(plan.changes, now)
        await tx.unpost([record_seq(r.id) for r in plan.changes if not r.is_active])
    evicted: list[int] = []
    live = active + plan.live_delta
    if live > cap:
        excess = live - cap
        params = {"scope": scope, "excess": excess}
        groups = await tx.rows_of((sql.lru_never_used, params), (sql.lru_used, params))
        evicted = await _retire(tx, batches.pick_eviction(groups[0], groups[1], excess),
                                Status.EVICTED, now)
    for statement in (sql.scrub_swept, sql.purge):
        await tx.run(statement, {"scope": scope, "rows": batches.PURGE_ROWS, "cutoff": cutoff})
    await tx.run(sql.set_counts, {"scope": scope, "last": plan.next_seq - 1,
                                  "active": live - len(evicted)})
    counts = plan.counts + WriteCounts(evicted=len(evicted))
    await tx.counters(counting.write_rows(scope, counts, now))
    return counts


async def _retire(tx: Tx, seqs: Sequence[int], status: Status, now: int) -> list[int]:
    """Retire the active ones of rows ``seqs`` with ``status``, out of the index; their seqs."""
    if not seqs:
        return []
    retired = [seq for (seq,) in await tx.rows(tx.sql.retire, {
        "scope": tx.scope, "seqs": tx.ints(seqs), "status": status.value, "now": now})]
    await tx.unpost(retired)
    return retired


async def forget(tx: Tx, seq: int, now: int) -> bool:
    """Scrub one active record: text, dedup key, keywords and tokens emptied, out of the
    index."""
    if await tx.lock(now, False) is None:
        return False
    scope = tx.scope
    params = {"scope": scope, "seq": seq, "id": memory_id(scope, seq), "now": now,
              "seqs": tx.ints([seq])}
    if not await tx.rows(tx.sql.active_seqs, params) or not await tx.forget(params):
        return False
    await tx.run(tx.sql.add_active, {"scope": scope, "delta": -1})
    await tx.counters(counting.forget_rows(scope, now))
    return True


async def sweep(tx: Tx, now: int, dry_run: bool) -> SweepResult:
    """Retire the active facts the gate would refuse today (``engine.plan_sweep``)."""
    if not dry_run and await tx.lock(now, False) is None:
        return SweepResult(swept=0)
    swept = engine.plan_sweep(await tx.records(tx.sql.active_facts, {"scope": tx.scope}))
    if dry_run:
        return SweepResult(swept=len(swept), ids=tuple(r.id for r in swept))
    retired = await _retire(tx, [record_seq(r.id) for r in swept], Status.SWEPT, now)
    await tx.run(tx.sql.add_active, {"scope": tx.scope, "delta": -len(retired)})
    await tx.counters(counting.sweep_rows(tx.scope, len(retired), now))
    return SweepResult(swept=len(swept))


async def purge(tx: Tx, now: int, cutoff: int) -> PurgeResult:
    """The retention purge a write applies, on every due row of the scope."""
    if await tx.lock(now, False) is None:
        return PurgeResult()
    params = {"scope": tx.scope, "rows": ALL_ROWS, "cutoff": cutoff}
    done = [await tx.count(statement, params) for statement in (tx.sql.purge,
                                                                  tx.sql.scrub_swept)]
    if any(done):
        await tx.run(tx.sql.next_generation, params)
    return PurgeResult(purged=done[0], scrubbed=done[1])


async def delete_scope(tx: Tx, now: int) -> int:
    """Delete every record of the scope, whatever its status, its index and its counters;
    how many records. Its row stays, emptied, so no id it gave is given again."""
    if await tx.lock(now, False) is None:
        return 0
    await tx.drop()
    deleted = await tx.count(tx.sql.delete_records, {"scope": tx.scope})
    await tx.run(tx.sql.empty_scope, {"scope": tx.scope})
    return deleted


async def scrub_provenance(tx: Tx, now: int, person: str) -> int:
    """Replace ``person`` in the scope's thread keys and run ids (``core.provenance``); the
    number of rows changed."""
    if not person or await tx.lock(now, False) is None:
        return 0
    changed = scrubbed_sources(await tx.rows(tx.sql.naming, {
        "scope": tx.scope, "person": person}), tx.scope, person)
    if changed:
        await tx.many(tx.sql.set_source, changed)
        await tx.run(tx.sql.next_generation, {"scope": tx.scope})
    return len(changed)


async def import_scope(tx: Tx, analyzer: Analyzer, batch: Sequence[tuple[int, Record]],
                       now: int) -> int:
    """Import one scope's checked records (``stores.porting.group_import``) not held yet;
    how many."""
    locked = await tx.lock(now, True)
    assert locked is not None
    scope = tx.scope
    held = {seq for (seq,) in await tx.rows(tx.sql.held_seqs, {
        "scope": scope, "seqs": tx.ints([seq for seq, _record in batch])})}
    added = [item for item in batch if item[0] not in held]  # in seq order
    if not added:
        return 0
    tokens = {seq: record_tokens(r, analyzer) if r.is_active else [] for seq, r in added}
    await tx.insert([(seq, r, tokens[seq]) for seq, r in added], now)
    # Each record's neighbours, from the table (which now holds the imported rows).
    around = sorted({n for seq, _r in added for n in (seq - 1, seq + 1)})
    beside = {seq: row for seq, *row in await tx.rows(tx.sql.neighbours, {
        "scope": scope, "seqs": tx.ints(around)})}
    continues, follows = import_threads(added, beside)
    await tx.post([(seq, tokens[seq], flag) for seq, flag in continues.items()])
    if follows:
        await tx.follow(follows, beside)
    await tx.run(tx.sql.import_counts, {"scope": scope, "last": max(locked[0], added[-1][0]),
                                        "added": len(continues)})
    return len(added)
