"""Use counts not saved yet, per shard and scope, saved one transaction a shard without waiting
for the disk: a process killed outright loses its last ``usage_flush_ms`` of uses, never a
record. A write saves its scope's first, so its dedup and eviction see them.

Every read answering a caller adds the uses not in its rows yet, exactly once. A save also
moves the scope's ``scopes.uses`` counter on, its uses waiting in ``_saving`` tagged with the
value it wrote; a read takes the counter with its rows (one snapshot) and adds the pending
uses and those being saved whose tag its snapshot has not reached. A committed save's entries
stay while a read that may predate the commit is under way. The shard's lock guards only
these dictionaries, never a statement: a write waiting on the disk holds up no read.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from scopemem.stores.shared.bumps import Bumps, add_bumps, bumped, merge_bumps
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared import statements as st

__all__ = ["PendingUses", "relaxed"]


class _Saving:
    """One scope's uses in one save's transaction, tagged once applied."""

    __slots__ = ("bumps", "tag")

    def __init__(self, bumps: Bumps) -> None:
        self.bumps = bumps
        self.tag: int | None = None  # the scope's uses counter the transaction wrote


class PendingUses:
    """The uses waiting to be saved, shard by shard, each shard with its lock."""

    def __init__(self, shards: int) -> None:
        self.locks = [threading.Lock() for _ in range(shards)]
        self._pending: list[dict[str, Bumps]] = [{} for _ in range(shards)]
        self._saving: list[dict[str, list[_Saving]]] = [{} for _ in range(shards)]
        # Reads between their statement and their look at the dictionaries, per shard, and
        # the committed entries kept for them: a read whose snapshot predates a commit must
        # still find that commit's entry (see ``rows``).
        self._readers = [0] * shards
        self._committed: list[list[tuple[str, _Saving]]] = [[] for _ in range(shards)]

    def __len__(self) -> int:
        return sum(len(bumps) for shard in self._pending for bumps in shard.values())

    def shards(self) -> list[int]:
        """The shards holding uses not saved yet."""
        return [index for index, scopes in enumerate(self._pending) if scopes]

    def add(self, shard: int, scope_key: str, seqs: Sequence[int], now: int) -> None:
        """Count one use of each of ``seqs``."""
        with self.locks[shard]:
            add_bumps(self._pending[shard].setdefault(scope_key, {}), seqs, now)

    def rows(self, conn: Any, shard: int, scope_key: str, statement: str,
             params: dict[str, Any], lead: int = 1
             ) -> tuple[Sequence[Any] | None, list[Sequence[Any]]]:
        """The rows of ``statement`` (``lead`` columns, the first the scope's uses counter,
        then ``RECORD_COLUMNS``, or NULLs for none) as they are with every use not in them
        yet: the first row's leading columns (None: no row), and the rows without them."""
        lock = self.locks[shard]
        with lock:
            self._readers[shard] += 1
        rows: list[Any] = []
        try:
            rows = conn.execute(statement, params).fetchall()
        finally:
            with lock:
                self._readers[shard] -= 1
                counted = rows[0][0] if rows and rows[0][0] is not None else 0
                missing = self._missing(shard, scope_key, counted) if rows else None
                if not self._readers[shard]:
                    self._forget_committed(shard)
        if not rows:
            return None, []
        found = [row[lead:] for row in rows if row[lead] is not None]
        if missing:
            found = [bumped(row, missing) for row in found]
        return rows[0][:lead], found

    def _missing(self, shard: int, scope_key: str, counted: int) -> Bumps | None:
        """The uses a snapshot at uses counter ``counted`` lacks (the caller holds the
        lock)."""
        pending = self._pending[shard].get(scope_key)
        saving = [entry.bumps for entry in self._saving[shard].get(scope_key, ())
                  if entry.tag is None or entry.tag > counted]
        if not saving:
            return pending
        missing: Bumps = {}
        for bumps in (pending or {}), *saving:
            merge_bumps(missing, bumps)
        return missing

    @contextlib.contextmanager
    def saving(self, shard: int, scope_key: str | None = None) -> Iterator[
            list[tuple[str, _Saving]]]:
        """The shard's pending uses (only ``scope_key``'s when given), moved to the saving
        set for the block, which applies them (``apply``) in its transaction and commits.
        They leave the saving set when the block ends; if it raises, they are pending again."""
        with self.locks[shard]:
            if scope_key is None:
                batch, self._pending[shard] = self._pending[shard], {}
            else:
                one = self._pending[shard].pop(scope_key, None)
                batch = {scope_key: one} if one else {}
            entries = [(key, _Saving(bumps)) for key, bumps in batch.items()]
            for key, entry in entries:
                self._saving[shard].setdefault(key, []).append(entry)
        committed = False
        try:
            yield entries
            committed = True
        finally:
            with self.locks[shard]:
                if committed:
                    # A read under way may hold a snapshot from before the commit: the
                    # entries stay (found by their tag) until no read is.
                    self._committed[shard].extend(entries)
                    if not self._readers[shard]:
                        self._forget_committed(shard)
                else:
                    for key, entry in entries:
                        self._drop(shard, key, entry)
                        merge_bumps(self._pending[shard].setdefault(key, {}), entry.bumps)

    def _forget_committed(self, shard: int) -> None:
        """Drop the committed entries: no read holds a snapshot from before them (the
        caller holds the lock)."""
        for key, entry in self._committed[shard]:
            self._drop(shard, key, entry)
        self._committed[shard].clear()

    def _drop(self, shard: int, key: str, entry: _Saving) -> None:
        held = self._saving[shard][key]
        held.remove(entry)
        if not held:
            del self._saving[shard][key]

    def apply(self, conn: Any, shard: int, entries: list[tuple[str, _Saving]]) -> None:
        """Persist ``entries`` in the caller's transaction: one statement for the uses of
        every scope, one moving each scope's uses counter on (each entry tagged with its
        scope's). Two statements whatever the scopes: over 10,000 scopes a save holds
        hundreds of them, and a pair of statements each made saves most of the writing
        threads' work."""
        conn.execute(st.BUMP, {"bumps": json.dumps(
            [[scope_key, seq, uses, last] for scope_key, entry in entries
             for seq, (uses, last) in entry.bumps.items()], ensure_ascii=False)})
        tags = dict(conn.execute(st.NEXT_USES, {"scopes": json.dumps(
            [scope_key for scope_key, _entry in entries], ensure_ascii=False)}).fetchall())
        with self.locks[shard]:
            for scope_key, entry in entries:
                entry.tag = tags.get(scope_key, 0)

    def save(self, conn: Any, shard: int, synchronous: str) -> int:
        """Commit every use pending in ``shard`` in one transaction; how many rows. On
        failure the uses stay pending (for the next save) and the error is raised."""
        with self.saving(shard) as entries:
            if not entries:
                return 0
            with relaxed(conn, synchronous), sqlite_sql.immediate(conn):
                self.apply(conn, shard, entries)
            return sum(len(entry.bumps) for _key, entry in entries)


@contextlib.contextmanager
def relaxed(conn: Any, synchronous: str) -> Iterator[None]:
    """Commits in the block do not wait for the disk (use counts, counters: advisory), when
    the store's ``synchronous`` level would have them wait."""
    relax = synchronous in ("full", "extra")
    if relax:
        conn.execute("PRAGMA synchronous = NORMAL")
    try:
        yield
    finally:
        if relax:
            conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
