"""One open scope file as the store holds it (``Handle``), and what travels with it.

A handle is a cached connection with the lock that keeps it to one thread at a time (the
event loop takes it too, without waiting, to check the view is current), the usage bumps
not saved yet and the scope's in-memory view. ``base.StoreBase`` keeps handles in its cache
of open files.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from scopemem.stores.shared.bumps import add_bumps, merge_bumps
from scopemem.stores.sqlite.view import ScopeView
from scopemem.stores.sqlite.walheader import WalHeader


@attrs.frozen
class Carry:
    """What a write read to carry its scope's view on (``SqliteStore._plan_carry``)."""

    view: ScopeView
    rows: list[Sequence[Any]]
    gone: set[int]
    removed_terms: dict[int, list[str]]
    generation: int
    # The uses of each pending bump the old view already held when the write dropped it
    # (``Handle.seen``): at the install only the bumps added since are applied to it again.
    seen: dict[int, int] = attrs.Factory(dict)
    # The WAL-index header read just before ``generation`` was (see walheader.py).
    header: bytes | None = None



@attrs.frozen
class Heavy:
    """A view that can answer, but not on the loop."""

    handle: Any
    view: ScopeView



@attrs.frozen
class Unverified:
    """A view the event loop could not check without waiting: a pool thread holds the
    scope's connection for a moment."""

    handle: Any


class Handle:
    """One cached connection and the lock that keeps it to one thread at a time."""

    __slots__ = ("bump_lock", "carry", "closed", "conn", "large", "live", "lock", "path", "pending",
                 "probed", "retrievals", "seen", "view", "view_refused", "vocab", "wal",
                 "wal_tried")

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.conn: Any = None
        self.closed = False
        # Usage bumps of retrievals, not committed yet: seq → [uses, last use]. A
        # transaction takes the whole dict as its batch and applies it first. ``bump_lock``
        # guards it and ``view`` (never held across I/O: the event loop takes it too).
        self.bump_lock = threading.Lock()
        self.pending: dict[int, list[int]] = {}
        # The scope's active rows in memory (None until built, and again after any change to
        # the rows), and the read-only connection the event loop checks its generation on.
        self.view: ScopeView | None = None
        self.view_refused = False  # too large for the cache when last tried
        self.retrievals = 0  # through SQL, since the handle opened
        # More active rows than a small scope's read takes (reads.SMALL_SCOPE_ROWS) when
        # last read: retrievals through SQL ask the index.
        self.large = False
        # Whether the connection has its temp.records_vocab table (sql.VOCAB_TABLE_SQL),
        # made by the first retrieval through the prefilter: a small scope's never needs it,
        # and making it costs a tenth of an open.
        self.vocab = False
        self.probed: tuple[object, int] | None = None  # (epoch, generation read in it)
        # What a write read for carrying the view on (see _plan_carry), applied on the loop.
        self.carry: Carry | None = None
        # The view this store's own write vouches for while its transaction holds the file's
        # write lock (no other process can commit meanwhile) and the view's generation is
        # the file's: the event loop answers from it without a probe until the commit.
        self.live: ScopeView | None = None
        # seq -> uses of the pending bumps the last view dropped held (see Carry.seen).
        self.seen: dict[int, int] = {}
        # The file's WAL-index header as SQLite maps it (walheader.py), found by the first
        # read of rows for a view; closed before the connection is.
        self.wal: WalHeader | None = None
        self.wal_tried = False

    def wal_header(self, *, held: bool = False) -> bytes | None:
        """The file's WAL-index header now (None when it cannot be read: probe instead).
        The map is made only by a caller that holds the connection (``held``): the first
        read of a view's rows always does."""
        wal = self.wal
        if wal is None:
            if not held or self.wal_tried or self.closed or self.conn is None:
                return None
            self.wal_tried = True
            wal = self.wal = WalHeader.open(self.conn, in_wal=True)
            if wal is None:
                return None
        return wal.read()

    def close_wal(self) -> None:
        wal, self.wal = self.wal, None
        if wal is not None:
            wal.close()

    def add_bumps(self, seqs: Sequence[int], now: int) -> bool:
        """Count one use of each row at ``now``; False (nothing counted) when the handle is
        closed: its last commit may be done."""
        with self.bump_lock:
            if self.closed:
                return False
            add_bumps(self.pending, seqs, now)
            if self.view is not None:
                self.view.bump(dict.fromkeys(seqs, (1, now)))
            return True

    def pending_copy(self) -> dict[int, list[int]]:
        with self.bump_lock:
            return {seq: list(bump) for seq, bump in self.pending.items()}

    def take_batch(self) -> dict[int, list[int]]:
        """The pending bumps, now a batch of their own (the caller commits or returns it)."""
        with self.bump_lock:
            batch = self.pending
            self.pending = {}
            return batch

    def return_batch(self, batch: Mapping[int, list[int]]) -> None:
        """A batch whose transaction failed: its bumps are pending again."""
        with self.bump_lock:
            merge_bumps(self.pending, batch)

    def drop_view(self, view: ScopeView | None = None) -> ScopeView | None:
        """Forget the view (only if it is still ``view``, when given); the view dropped."""
        with self.bump_lock:
            current = self.view
            if current is None or (view is not None and current is not view):
                return None
            self.view = None
            self.seen = {seq: bump[0] for seq, bump in self.pending.items()}
            return current
