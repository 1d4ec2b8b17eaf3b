"""Use counts not saved yet, per shard and scope, and their save: one transaction per shard.

A retrieval counts one use of each record it returns here (``add``) and does not wait for
it to be saved. ``save`` commits everything pending in a shard in one transaction (one
``UPDATE`` per scope, whatever the number of retrievals), without waiting for the disk: a
process killed outright loses the uses of its last ``usage_flush_ms``, never a record.

Every read of rows that answers a caller (a retrieval's candidates, a listing) applies the
uses pending for their scope, so each answer shows the uses of every retrieval that
returned before it. The shard's ``lock`` makes that exact: the rows and the pending uses are
read under it, and a save holds it from taking the pending uses until its commit, so a read
sees each use once, either in the row or pending, never in both or neither. A write that
applies a scope's pending uses first (so its dedup and eviction see them) holds it the same
way.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from typing import Any

from scopemem.stores.shared.bumps import Bumps, add_bumps, merge_bumps
from scopemem.stores.sqlite_shared import statements as st

__all__ = ["PendingUses", "apply"]

log = logging.getLogger("scopemem.stores.sqlite")


def apply(conn: Any, scope_key: str, bumps: Bumps) -> None:
    """Persist a scope's pending uses in the caller's transaction, in one statement."""
    conn.execute(st.BUMP, {"scope": scope_key, "bumps": json.dumps(
        [[seq, uses, last] for seq, (uses, last) in bumps.items()])})


class PendingUses:
    """The uses waiting to be saved, shard by shard, each shard with its lock."""

    def __init__(self, shards: int) -> None:
        self.locks = [threading.Lock() for _ in range(shards)]
        self._pending: list[dict[str, Bumps]] = [{} for _ in range(shards)]

    def __len__(self) -> int:
        return sum(len(bumps) for shard in self._pending for bumps in shard.values())

    def shards(self) -> list[int]:
        """The shards holding uses not saved yet."""
        return [index for index, scopes in enumerate(self._pending) if scopes]

    def of(self, shard: int, scope_key: str) -> Bumps | None:
        """The scope's pending uses (the caller holds the shard's lock)."""
        return self._pending[shard].get(scope_key)

    def add(self, shard: int, scope_key: str, seqs: Iterable[int], now: int) -> None:
        with self.locks[shard]:
            pending = self._pending[shard].setdefault(scope_key, {})
            add_bumps(pending, seqs, now)
            if not pending:
                del self._pending[shard][scope_key]

    def take_scope(self, shard: int, scope_key: str) -> Bumps | None:
        """The scope's pending uses, no longer pending (the caller holds the lock and saves
        them in its transaction, or hands them back with ``give_back``)."""
        return self._pending[shard].pop(scope_key, None)

    def give_back(self, shard: int, scope_key: str, bumps: Bumps) -> None:
        """Uses whose save did not commit, pending again (the caller holds the lock)."""
        merge_bumps(self._pending[shard].setdefault(scope_key, {}), bumps)

    def save(self, conn: Any, shard: int, relax: bool, synchronous: str) -> int:
        """Commit every use pending in ``shard`` in one transaction; how many rows. On
        failure the uses stay pending (for the next save) and the error is raised."""
        with self.locks[shard]:
            batch, self._pending[shard] = self._pending[shard], {}
            if not batch:
                return 0
            try:
                if relax:
                    conn.execute("PRAGMA synchronous = NORMAL")
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    try:
                        for scope_key, bumps in batch.items():
                            apply(conn, scope_key, bumps)
                        conn.execute("COMMIT")
                    except BaseException:
                        if not conn.getautocommit():
                            conn.execute("ROLLBACK")
                        raise
                finally:
                    if relax:
                        conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            except BaseException:
                for scope_key, bumps in batch.items():
                    self.give_back(shard, scope_key, bumps)
                raise
            return sum(map(len, batch.values()))
