"""Opening the shard files: a connection per shard per thread, each shard checked once.

apsw releases the GIL while SQLite works, so the store's database calls run on its two
thread pools (reads, writes). Each pool thread keeps its own connection to every shard it
has used (``threading.local``): a connection is never shared between threads, so no lock
guards it, and a thread holds at most ``SHARDS`` of them. WAL mode lets every thread read
while one writes; writers to a shard are queued on the event loop by the store (one
``asyncio.Lock`` per shard) before they reach SQLite's own lock.

The first connection of the process to a shard checks the file is that shard of this store
(``schema.identity_problem``), brings its schema up to date and re-derives its terms if they
follow other tokenizing rules or languages (``refold.py``), in one ``BEGIN IMMEDIATE``
transaction, before any copy of a scope of the shard is read; later connections only set
their pragmas. A thread opening a shard while another checks it waits for that check.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from scopemem.core.words import Analyzer
from scopemem.errors import StoreError
from scopemem.stores.sqlite_shared import refold, schema
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared.commits import CommitWatch
from scopemem.stores.sqlite_shared.sql import descriptors_busy
from scopemem.stores.sqlite_shared.walheader import WalHeader

__all__ = ["Shards"]


class Shards:
    """The shard files of one data directory, and the threads' connections to them."""

    def __init__(self, root: str, *, analyzer: Analyzer, shards: int = schema.SHARDS,
                 synchronous: str = "full", busy_timeout_ms: int = 5000) -> None:
        self.root = root
        self.analyzer = analyzer
        self.count = shards
        self.synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._lock = threading.Lock()
        self._checked: set[int] = set()  # shards whose identity and schema this process saw
        self._checking: dict[int, threading.Lock] = {}  # held while a shard is checked
        self._all: list[Any] = []  # every connection, to close them all at the end
        # Each shard's WAL-index header, from SQLite's map of it (``walheader.py``): one
        # per shard, through whichever connection first had it mapped (the map is the
        # process's, and the connection stays open until ``close``).
        self._headers: dict[int, WalHeader] = {}
        self._closed = False

    def path(self, index: int) -> str:
        return os.path.join(self.root, schema.shard_file_name(index, self.count))

    def of(self, scope_key: str) -> int:
        return schema.shard_of(scope_key, self.count)

    def exists(self, index: int) -> bool:
        return index in self._checked or os.path.exists(self.path(index))

    def connection(self, index: int, *, create: bool) -> Any | None:
        """This thread's connection to shard ``index``; None when the shard has no file yet
        and ``create`` is false (a read never creates a file)."""
        conns: dict[int, Any] | None = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        conn = conns.get(index)
        if conn is not None:
            if index not in self._headers:
                self._map_header(index, conn)
            return conn
        if not create and not self.exists(index):
            return None
        conn = self._open(index, create=create)
        conns[index] = conn
        watches: dict[int, CommitWatch] | None = getattr(self._local, "watches", None)
        if watches is None:
            watches = self._local.watches = {}
        watches[index] = CommitWatch(conn, lambda: self._read_header(index))
        return conn

    def watch(self, index: int) -> CommitWatch | None:
        """The commit watch of this thread's connection to shard ``index``
        (``commits.py``), once it has one."""
        watches: dict[int, CommitWatch] | None = getattr(self._local, "watches", None)
        return None if watches is None else watches.get(index)

    def _read_header(self, index: int) -> bytes | None:
        header = self._headers.get(index)
        return None if header is None else header.read()

    def header(self, index: int) -> WalHeader | None:
        """Shard ``index``'s WAL-index header, once a connection has it mapped."""
        return self._headers.get(index)

    def _map_header(self, index: int, conn: Any) -> None:
        """Keep the shard's header map, if ``conn`` (held by this thread) has one yet."""
        header = WalHeader.open(conn, in_wal=True)
        if header is not None:
            with self._lock:
                if self._closed or index in self._headers:
                    header.close()
                else:
                    self._headers[index] = header

    def _open(self, index: int, *, create: bool) -> Any:
        apsw = sqlite_sql.apsw_module()
        path = self.path(index)
        if create:
            try:
                os.makedirs(self.root, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"sqlite store: cannot create {self.root}: {exc}") from exc
        flags = apsw.SQLITE_OPEN_READWRITE | (apsw.SQLITE_OPEN_CREATE if create else 0)
        try:
            conn = apsw.Connection(path, flags=flags)
        except apsw.Error as exc:
            raise (descriptors_busy(path, exc)
                   or StoreError(f"sqlite store: cannot open {path}: "
                                 f"{sqlite_sql.describe(exc)}")) from exc
        try:
            conn.set_busy_timeout(self.busy_timeout_ms)
            conn.execute("PRAGMA secure_delete = ON")
            mode = self._wal_mode(conn)
            if str(mode).lower() != "wal":
                raise StoreError(f"sqlite store: {path}: cannot use WAL mode (got {mode})")
            conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            if index not in self._checked:
                self._check(conn, index, path)
            # The token index's vocabulary, which a copy of a scope is read from
            # (``statements.SCOPE_POSTINGS``): a table of this connection's own.
            conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.terms_vocab"
                         " USING fts5vocab(main, terms_fts, 'instance')")
        except apsw.Error as exc:
            conn.close()
            raise (descriptors_busy(path, exc)
                   or StoreError(f"sqlite store: {path}: {sqlite_sql.describe(exc)}")) from exc
        except BaseException:
            conn.close()
            raise
        with self._lock:
            if self._closed:
                conn.close()
                raise StoreError("the sqlite store is closed")
            self._all.append(conn)
        return conn

    def _wal_mode(self, conn: Any) -> str:
        """Switch to WAL mode (a no-op once the file is in it). Two connections switching a
        new file at once can get SQLITE_BUSY without the busy handler being asked (SQLite
        refuses to let two lock upgrades wait on each other): try again for as long as the
        busy timeout allows."""
        apsw = sqlite_sql.apsw_module()
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        while True:
            try:
                return str(conn.execute("PRAGMA journal_mode = WAL").fetchall()[0][0])
            except apsw.BusyError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.001)

    def _check(self, conn: Any, index: int, path: str) -> None:
        with self._lock:
            checking = self._checking.setdefault(index, threading.Lock())
        with checking:
            if index in self._checked:
                return  # by another thread, while this one waited
            with sqlite_sql.immediate(conn):
                problem = schema.identity_problem(conn, index, self.count)
                if problem is not None:
                    raise StoreError(f"sqlite store: {path}: {problem}")
                schema.apply_schema(conn, index, self.count)
                refold.refold(conn, self.analyzer, path)
            with self._lock:
                self._checked.add(index)

    def close(self) -> None:
        """Close every connection (the pools are stopped first: none is in use)."""
        with self._lock:
            self._closed = True
            conns, self._all = self._all, []
            headers, self._headers = self._headers, {}
        for header in headers.values():
            header.close()  # before the connections unmap it
        for conn in conns:
            conn.close()
