"""The scopes' records in memory beside their copies (``copies.RowCopy``) in the shared-file
store, kept at the copies' counters: installed as a retrieval or a copy reads them, with the
uses noted meanwhile replayed into them (``notes.py``); carried across this store's own
writes, with each copy's layers folded on a thread once due (``copies.Layered``).

A copy being read while this store writes the scope is given those writes as it arrives
(``missed``): a scope written between all its reads would otherwise be copied at a counter
already gone.
"""

from __future__ import annotations

import asyncio
import logging

from scopemem.stores.shared.cache import PostingsCache, ScopeCopy
from scopemem.stores.sqlite_shared import copies, reads
from scopemem.stores.sqlite_shared.commits import Move, Moves
from scopemem.stores.sqlite_shared.notes import UseNotes
from scopemem.stores.sqlite_shared.pools import ShardPools
from scopemem.stores.sqlite_shared.shards import Shards
from scopemem.stores.sqlite_shared.usage import PendingUses
from scopemem.stores.sqlite_shared.writes import Change

__all__ = ["MAX_ROW_COPIES", "HeldRows"]

log = logging.getLogger("scopemem.stores.sqlite")

#: Scopes whose records are kept beside their copies before those without a copy are pruned.
MAX_ROW_COPIES = 4_096


class HeldRows:
    """The records in memory of ``SharedSqliteStore``'s copies: ``rows`` (by scope) is the
    store's own dict, shared with its ``UseNotes``."""

    def __init__(self, shards: Shards, pools: ShardPools, uses: PendingUses, notes: UseNotes,
                 cache: PostingsCache, moves: Moves, rows: dict[str, copies.RowCopy]) -> None:
        self._shards = shards
        self._pools = pools
        self._uses = uses
        self._notes = notes
        self._cache = cache
        self._moves = moves
        self._rows = rows
        # The store's own writes to scopes whose copy is being read meanwhile (``copy``).
        self._missed: dict[str, list[Change]] = {}
        # Carried copies' layers being folded on a thread, by scope.
        self._folding: dict[str, asyncio.Task[None]] = {}

    def rows_of(self, scope_key: str, copy: ScopeCopy | None) -> copies.RowCopy | None:
        """The scope's records in memory, when they are at its copy's counter."""
        rows = self._rows.get(scope_key)
        if rows is None or copy is None or rows.generation != copy.generation:
            return None
        return rows

    async def copy(self, scope_key: str) -> ScopeCopy | None:
        """The scope's whole index and records as they are now, for copies in memory (built
        on the pool)."""
        shard = self._shards.of(scope_key)
        self._missed[scope_key] = []
        try:
            made = await self._pools.read(shard, reads.copy_of, self._uses, shard, scope_key)
        finally:
            missed = self._missed.pop(scope_key, [])
        if made is None:
            return None
        copy, rows = made
        for change in missed:  # in the order they committed
            if change.before == copy.generation:
                copy = copies.carried(copy, change)
                rows = copies.carried_rows(rows, change)
        self.install(shard, scope_key, rows)
        return copy

    def install(self, shard: int, scope_key: str, rows: copies.RowCopy) -> bool:
        """Hold ``rows`` beside the scope's copy, unless newer are held or uses noted since
        they were read can no longer be replayed into them; whether they are held."""
        held = self._rows.get(scope_key)
        if (held is not None and held.generation >= rows.generation) or \
                self._notes.behind(shard, rows):
            return False
        self._notes.replay(shard, scope_key, rows)
        self._rows[scope_key] = rows
        if len(self._rows) > 2 * MAX_ROW_COPIES:
            self._prune()
        return True

    def _prune(self) -> None:
        """Keep only the records of scopes whose copy is still held at their counter."""
        kept = {key: rows for key, rows in self._rows.items()
                if self.rows_of(key, self._cache.latest(key)) is rows}
        self._rows.clear()
        self._rows.update(kept)

    def carry(self, shard: int, scope_key: str, change: Change, move: Move | None) -> None:
        """Carry the scope's copy and records across this store's write ``change`` (its
        header's ``move``, if seen), and let every copy of the shard follow that move."""
        missed = self._missed.get(scope_key)
        if missed is not None:
            missed.append(change)
        rows = self._rows.pop(scope_key, None)
        moved = copies.carry(self._cache, scope_key, change)
        if moved is not None:
            self._fold_later(scope_key, moved)
        if moved is not None and rows is not None and rows.generation == change.before:
            carried = self._rows[scope_key] = copies.carried_rows(rows, change)
            if move is not None:
                # Nobody committed between the copy and the write, nor after it.
                carried.header = move.after
        if move is not None:
            # The write changed no other scope's rows, and the scope's own are carried (or
            # no longer held): every copy may follow its move now.
            self._moves.settle(shard, move)

    def _fold_later(self, scope_key: str, copy: ScopeCopy) -> None:
        """Fold the copy's layers on a thread once they are due, so the event loop never
        spends the tens of milliseconds a fold of a large scope takes (``copies.py``)."""
        layered = copies.fold_due(copy)
        if layered is None or scope_key in self._folding:
            return
        self._folding[scope_key] = asyncio.get_running_loop().create_task(
            self._fold(scope_key, layered), name=f"scopemem-sqlite-fold:{scope_key}")

    async def _fold(self, scope_key: str, layered: copies.Layered) -> None:
        try:
            folded = await asyncio.get_running_loop().run_in_executor(
                self._pools.pool("fold", 1), layered.folded)
        except Exception as exc:  # a fold is an optimization: the layers still answer
            log.warning("sqlite store: folding the copy of %s failed: %s", scope_key, exc)
            return
        finally:
            self._folding.pop(scope_key, None)
        held = self._cache.latest(scope_key)
        if held is not None:
            # Under the copy held now, whatever writes it was carried across meanwhile.
            done = copies.with_folded(held, layered, folded)
            if done is not None:
                self._cache.replace(scope_key, held.generation, done)

    async def close(self) -> None:
        """Stop the folds under way."""
        folding = list(self._folding.values())
        for task in folding:
            task.cancel()
        await asyncio.gather(*folding, return_exceptions=True)
