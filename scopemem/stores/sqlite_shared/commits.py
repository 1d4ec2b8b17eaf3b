"""Knowing that a commit of this store's was the last one in its shard, and what it left.

Copies in memory answer on the event loop while their shard's WAL-index header is the one
read when they were last confirmed (``copies.RowCopy``). Every commit moves the header, the
store's own too, so without more each write, and each save of use counts, would send every
scope of its shard back through SQL once to be confirmed again. But the store knows what
its own commits changed: a write changes one scope (its copy is carried across, see
``copies.py``), a save of use counts changes no copy (the copies already hold the uses).
What it does not know by itself is whether another process committed between the header
it saw and its own commit, or just after it.

So each connection keeps two SQLite hooks (``CommitWatch``):

* the commit hook runs while the transaction still holds the shard's write lock, before its
  frames reach the WAL: the header read then is the one every reader saw last
  (``before``), and nobody can commit until this commit is done;
* the WAL hook runs just after the commit, with the commit's last frame number. The header
  read then is this commit's own when it shows that frame count with the WAL's salts of
  ``before``: a later commit by anyone appends frames (a larger count) or restarts the WAL
  (new salts). A commit that restarted the WAL itself (the first after a checkpoint that
  copied the whole WAL back) shows new salts too, but salt-1 is the WAL's restart count
  (SQLite's file format: incremented with each restart) and is exactly one more than
  ``before``'s; a later restart by anyone would make it two more.

When both hold, ``before`` → ``after`` is a *move* the store may follow for the copies its
commit did not change (``Moves``). Anything else (no header map yet, a copy of the header
being rewritten, another process in between) is simply no move: the copies are confirmed
through SQL, as they would be without any of this.

A WAL hook replaces SQLite's automatic checkpoint (which is itself a WAL hook), so the
watch keeps SQLite's threshold (the connection's ``wal_autocheckpoint`` when the hook was
installed), but it only notes that a passive checkpoint is due (``checkpoint_due``): the
store runs it on the shard's writing thread right after the job whose commit made it due
(``store._write``), so the commit's caller does not wait for it (a checkpoint of a large
shard copies a few megabytes back into the database file, 5-10 ms, about every twentieth
write of 50 at the cap of a 10,000-record scope) and the shard's next write waits for it
instead.
"""

from __future__ import annotations

import contextlib
import struct
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import attrs

from scopemem.stores.sqlite_shared import sql as sqlite_sql

__all__ = ["CommitWatch", "Move", "Moves", "checkpoint"]

# WalIndexHdr (SQLite's wal.c): mxFrame is the u32 at offset 16, in the machine's own byte
# order; the two salts are the 8 bytes at offset 32, copied from the WAL file's header, so
# big-endian.
_FRAMES = struct.Struct("=I")
_FRAMES_AT = 16
_SALTS = slice(32, 40)
_SALT1 = struct.Struct(">I")
_SALTS_AT = 32
#: Moves kept per shard: enough for the commits between two retrievals of a scope.
MOVES_KEPT = 1_024


@attrs.frozen
class Move:
    """One of this store's commits: the shard's header just before it and just after."""

    before: bytes
    after: bytes


class CommitWatch:
    """A connection's commit and WAL hooks, reporting the move of each commit made while
    it is armed (the write pool's connections, for the writes that ask)."""

    def __init__(self, conn: Any, header: Callable[[], bytes | None]) -> None:
        self._header = header
        self._checkpoint_at = int(conn.execute("PRAGMA wal_autocheckpoint").fetchall()[0][0])
        self._armed = False
        self._before: bytes | None = None
        self.move: Move | None = None
        self.checkpoint_due = False
        conn.set_commit_hook(self._on_commit)
        conn.set_wal_hook(self._on_wal)

    def arm(self) -> None:
        """Report the next commits' move (the last one stays in ``move``)."""
        self._armed = True
        self.move = None

    def disarm(self) -> Move | None:
        """Stop reporting; the move of the last commit since ``arm``, if it was one."""
        self._armed = False
        self._before = None
        move, self.move = self.move, None
        return move

    def _on_commit(self) -> bool:
        self.move = None
        self._before = self._header() if self._armed else None
        return False  # let the commit go on

    def _on_wal(self, conn: Any, _name: str, frames: int) -> int:
        before, self._before = self._before, None
        if before is not None:
            after = self._header()
            if (after is not None and _FRAMES.unpack_from(after, _FRAMES_AT)[0] == frames
                    and (after[_SALTS] == before[_SALTS] or _restarted_once(before, after))):
                self.move = Move(before, after)
        if self._checkpoint_at > 0 and frames >= self._checkpoint_at:
            self.checkpoint_due = True
        return 0  # SQLITE_OK

    def take_due(self) -> bool:
        """Whether a commit since the last call made a checkpoint due."""
        due, self.checkpoint_due = self.checkpoint_due, False
        return due


def _restarted_once(before: bytes, after: bytes) -> bool:
    """Whether the WAL restarted exactly once between the two headers."""
    (salt1,) = _SALT1.unpack_from(after, _SALTS_AT)
    (was,) = _SALT1.unpack_from(before, _SALTS_AT)
    return bool(salt1 == (was + 1) & 0xFFFF_FFFF)


def checkpoint(conn: Any) -> None:
    """The passive checkpoint SQLite's automatic one would have run: as SQLite's own, one
    that cannot be done now (a reader in the way, a busy lock) is done at a later
    commit."""
    apsw = sqlite_sql.apsw_module()
    with contextlib.suppress(apsw.Error):
        conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)


class Moves:
    """Per shard, the moves of the store's commits that changed no copy but the ones the
    store carried itself: a copy confirmed at a header may follow them to the header of
    now.

    The writing thread adds a move as soon as its commit is done (``ShardPools._watched``),
    not when the event loop next gets to the write: under load that takes milliseconds,
    and every retrieval of the shard meanwhile would go through SQL to confirm its copy
    (about one in ten beside 200 writes a second). A write's move is *unsettled* for the
    scope it wrote until the loop has carried that scope's copy across (``settle``): until
    then only the other scopes' copies follow it."""

    def __init__(self, shards: int) -> None:
        # before → (after, the scope whose copy may not follow it yet, or None).
        self._moves: list[OrderedDict[bytes, tuple[bytes, str | None]]] = [
            OrderedDict() for _ in range(shards)]

    def add(self, shard: int, move: Move, unsettled: str | None = None) -> None:
        """Note ``move`` (from any thread: each step is one dict operation under the
        GIL); ``unsettled``: the scope whose copy the commit changed and the loop has not
        carried yet."""
        moves = self._moves[shard]
        moves[move.before] = (move.after, unsettled)
        while len(moves) > MOVES_KEPT:
            moves.popitem(last=False)

    def settle(self, shard: int, move: Move) -> None:
        """The move's scope has been carried across it (or holds no copy any more): every
        copy may follow it now."""
        moves = self._moves[shard]
        if moves.get(move.before, (None, None))[0] == move.after:
            moves[move.before] = (move.after, None)

    def reaches(self, shard: int, start: bytes | None, now: bytes,
                scope_key: str | None = None) -> bool:
        """Whether ``start`` is ``now``, or leads to it through the shard's moves (none of
        them unsettled for ``scope_key``)."""
        if start is None:
            return False
        moves = self._moves[shard]
        header: bytes = start
        for _ in range(MOVES_KEPT):
            if header == now:
                return True
            step = moves.get(header)
            if step is None or (step[1] is not None and step[1] == scope_key):
                return False
            header = step[0]
        return False
