"""Opening the shard files: a connection per shard per thread, each shard checked once.

apsw releases the GIL while SQLite works, so the store's database calls run on its two
thread pools (reads, writes). Each pool thread keeps its own connection to every shard it
has used (``threading.local``): a connection is never shared between threads, so no lock
guards it, and a thread holds at most ``SHARDS`` of them. WAL mode lets every thread read
while one writes; writers to a shard are queued on the event loop by the store (one
``asyncio.Lock`` per shard) before they reach SQLite's own lock.

The first connection of the process to a shard checks the file is that shard of this store
(``schema.identity_problem``), brings its schema up to date and re-derives its terms if they
follow other tokenizing rules or languages (``refold``), in one ``BEGIN IMMEDIATE``
transaction, before any copy of a scope of the shard is read; later connections only set
their pragmas. A thread opening a shard while another checks it waits for that check.

What a shard keeps from its records' text depends on the analyzer (``Analyzer.signature``,
recorded in ``meta`` under ``schema.META_FOLDING``): every row's dedup key (``records.norm``)
and the active rows' terms (``records.tokens`` and their documents in ``terms_fts``). A shard
written under other rules (or under none recorded, and holding records) has them re-derived
by the functions the write path uses; a second process opening it meanwhile waits for that
transaction, then finds the signature current. Rows, ids, statuses and use counts are
untouched; each document keeps its ``continues`` marker (its predecessor's row may be gone),
and every scope's change counter moves on, so no copy of the old terms held in memory
anywhere is used again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from typing import Any

from scopemem.core.text import normalize_text
from scopemem.core.words import Analyzer
from scopemem.errors import StoreError
from scopemem.stores.shared.tokens import index_tokens
from scopemem.stores.sqlite_shared import index, schema
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared.dialect import SQL
from scopemem.stores.sqlite_shared.files import OpenedFile, holds_data, identity
from scopemem.stores.sqlite_shared.sql import descriptors_busy

__all__ = ["DueCheckpoint", "Shards", "checkpoint", "refold"]

log = logging.getLogger("scopemem.stores.sqlite")


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
        self._closed = False
        self._opened: dict[int, OpenedFile] = {}  # each shard's file as first opened
        # The data directory as this process found or made it: never made again.
        self._root = identity(root) if os.path.isdir(root) else None

    def path(self, index: int) -> str:
        return os.path.join(self.root, schema.shard_file_name(index, self.count))

    def of(self, scope_key: str) -> int:
        return schema.shard_of(scope_key, self.count)

    def exists(self, index: int) -> bool:
        return index in self._checked or holds_data(self.path(index))

    def opened(self, index: int) -> OpenedFile | None:
        """Shard ``index``'s file as this process first opened it; None before."""
        return self._opened.get(index)

    def moved(self) -> list[str]:
        """What became of each shard file this process opened that is no longer the file at
        its path (``OpenedFile``), one line each; empty when none."""
        with self._lock:
            opened = list(self._opened.values())
        return [f"{file.path} {problem}" for file in opened
                if (problem := file.problem()) is not None]

    def connection(self, index: int, *, create: bool) -> Any | None:
        """This thread's connection to shard ``index``; None when the shard has no file yet
        and ``create`` is false (a read never creates a file)."""
        conns: dict[int, Any] | None = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        conn = conns.get(index)
        if conn is not None:
            return conn
        if not create and not self.exists(index):
            return None
        conn = self._open(index, create=create)
        conns[index] = conn
        dues: dict[int, DueCheckpoint] | None = getattr(self._local, "dues", None)
        if dues is None:
            dues = self._local.dues = {}
        dues[index] = DueCheckpoint(conn)
        return conn

    def count_scopes(self, index: int) -> int:
        """The scopes shard ``index`` holds, read without taking any lock: through this
        thread's connection once the shard's schema was checked; else through a connection
        of its own, closed after (the check takes the shard's write lock, which a writer
        counting scopes inside another shard's transaction must never wait for: two such
        writers would wait on each other). 0 for no file, or one without its tables yet."""
        if index in self._checked:
            conn = self.connection(index, create=False)
            return 0 if conn is None else int(conn.execute(SQL.count_scopes).fetchall()[0][0])
        if not self.exists(index):
            return 0
        apsw = sqlite_sql.apsw_module()
        path = self.path(index)
        try:
            conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READWRITE)
        except apsw.Error as exc:
            raise (descriptors_busy(path, exc)
                   or StoreError(f"sqlite store: cannot open {path}: "
                                 f"{sqlite_sql.describe(exc)}")) from exc
        try:
            conn.set_busy_timeout(self.busy_timeout_ms)
            if not conn.execute("SELECT 1 FROM sqlite_schema WHERE type = 'table'"
                                " AND name = 'scopes'").fetchall():
                return 0
            return int(conn.execute(SQL.count_scopes).fetchall()[0][0])
        except apsw.Error as exc:
            raise (descriptors_busy(path, exc)
                   or StoreError(f"sqlite store: {path}: {sqlite_sql.describe(exc)}")) from exc
        finally:
            conn.close()

    def checkpoint_due(self, index: int) -> bool:
        """Whether a commit on this thread's connection to shard ``index`` made a
        checkpoint due since the last call (``DueCheckpoint``)."""
        dues: dict[int, DueCheckpoint] | None = getattr(self._local, "dues", None)
        due = None if dues is None else dues.get(index)
        return due is not None and due.take()

    def _open(self, index: int, *, create: bool) -> Any:
        apsw = sqlite_sql.apsw_module()
        path = self.path(index)
        with self._lock:
            first = self._opened.get(index)
        problem = None if first is None else first.problem()
        if first is not None and problem is not None:
            raise first.refusal(problem)  # never a new file in its place
        if create:
            self.make_root()
        flags = apsw.SQLITE_OPEN_READWRITE | (apsw.SQLITE_OPEN_CREATE if create else 0)
        try:
            conn, opened = OpenedFile.opening(
                path, lambda: apsw.Connection(path, flags=flags))
        except apsw.Error as exc:
            raise (descriptors_busy(path, exc)
                   or StoreError(f"sqlite store: cannot open {path}: "
                                 f"{sqlite_sql.describe(exc)}")) from exc
        try:
            if first is not None and first.identity != opened.identity:
                raise first.refusal("was replaced by another file")
            opened.install(conn)
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
            self._opened.setdefault(index, opened)
        return conn

    def make_root(self) -> None:
        """The data directory, made if missing; one this process found or made before is
        never made again: deleted or replaced, it is refused (its shards' writes would
        start again from nothing)."""
        if self._root is not None:
            try:
                now = identity(self.root)
            except OSError as exc:
                raise StoreError(f"sqlite store: cannot reach {self.root}: {exc}") from exc
            if now != self._root:
                raise StoreError(
                    f"sqlite store: the data directory {self.root} was deleted or replaced"
                    " since this process opened it; nothing was written. Restore it as it"
                    " was, then restart the process (scopemem serve, the bot)")
            return
        try:
            os.makedirs(self.root, exist_ok=True)
            root = identity(self.root)
        except OSError as exc:
            raise StoreError(f"sqlite store: cannot create {self.root}: {exc}") from exc
        with self._lock:
            if self._root is None:
                self._root = root

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
                before = schema.apply_schema(conn, index, self.count)
                refold(conn, self.analyzer, path)
            if 0 < before < schema.SCHEMA_VERSION:  # committed: an older release refuses it
                log.warning("sqlite store: %s: migrated from schema version %d to %d; a"
                            " scopemem that reads only version %d refuses it from now on",
                            path, before, schema.SCHEMA_VERSION, before)
            with self._lock:
                self._checked.add(index)

    def close(self) -> None:
        """Close every connection (the pools are stopped first: none is in use)."""
        with self._lock:
            self._closed = True
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()


class DueCheckpoint:
    """A connection's WAL hook in place of SQLite's automatic checkpoint (which a WAL hook
    replaces): it notes that a commit made the checkpoint due, and the shard's writing
    thread runs it right after the write (``ShardPools.write``), so the write that made it
    due does not wait for it (a checkpoint of a large shard copies a few megabytes back
    into the database file, 5-10 ms, about every twentieth write of 50 at the cap of a
    10,000-record scope)."""

    def __init__(self, conn: Any) -> None:
        self._at = int(conn.execute("PRAGMA wal_autocheckpoint").fetchall()[0][0])
        self._due = False
        conn.set_wal_hook(self._on_wal)

    def _on_wal(self, _conn: Any, _name: str, frames: int) -> int:
        if self._at > 0 and frames >= self._at:
            self._due = True
        return 0  # SQLITE_OK

    def take(self) -> bool:
        due, self._due = self._due, False
        return due


def checkpoint(conn: Any) -> None:
    """The passive checkpoint SQLite's automatic one would have run: as SQLite's own, one
    that cannot be done now (a reader in the way, a busy lock) is done at a later
    commit."""
    apsw = sqlite_sql.apsw_module()
    with contextlib.suppress(apsw.Error):
        conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)


SCOPE_IDS = "SELECT scope_key, sid FROM scopes ORDER BY scope_key"
SCOPE_ROWS = ("SELECT seq, text, keywords, status, tokens != '' FROM records"
              " WHERE scope_key = :scope")
# The scope's documents carrying the marker term (``index.CONTINUES``).
CONTINUING = ("SELECT rowid & 4294967295 FROM terms_fts"
              " WHERE terms_fts MATCH '\"' || :head || :marker || '\"'")
# [[seq, dedup key, tokens or null], ...]: a scope's rows re-derived, one statement. A row
# retired since it was written keeps its terms in ``tokens`` (in no document): re-derived
# too; an empty column (a row scrubbed, or written retired) stays empty.
REFOLD_ROWS = ("WITH r (seq, norm, tokens) AS MATERIALIZED"
               " (SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(:rows))"
               " UPDATE records SET norm = r.norm, tokens = ifnull(r.tokens, records.tokens)"
               " FROM r WHERE records.scope_key = :scope AND records.seq = r.seq")
NEXT_GENERATIONS = "UPDATE scopes SET generation = generation + 1"


def refold(conn: Any, analyzer: Analyzer, path: str) -> int:
    """Re-derive the shard's dedup keys and terms under ``analyzer`` unless they follow it
    already, and record its signature; how many rows were re-derived. The caller holds a
    write transaction and has applied the schema."""
    signature = analyzer.signature
    recorded = schema.stored_meta(conn, schema.META_FOLDING)
    if recorded == signature:
        return 0
    scopes = conn.execute(SCOPE_IDS).fetchall()
    continuing = {sid: {seq for (seq,) in conn.execute(
        CONTINUING, {"head": index.prefix(sid), "marker": index.CONTINUES})}
        for _key, sid in scopes}
    index.unpost_all(conn)
    total = 0
    for scope_key, sid in scopes:
        rows = conn.execute(SCOPE_ROWS, {"scope": scope_key}).fetchall()
        changed: list[tuple[int, str, str | None]] = []
        documents: list[tuple[int, list[str], bool]] = []
        for seq, text, keywords, status, holds_terms in rows:
            terms = None
            if status == "active" or holds_terms:
                terms = index_tokens(text, json.loads(keywords), analyzer)
            if status == "active":
                documents.append((seq, terms or [], seq in continuing[sid]))
            changed.append((seq, normalize_text(text),
                            None if terms is None else " ".join(terms)))
        if changed:
            conn.execute(REFOLD_ROWS, {"scope": scope_key,
                                       "rows": json.dumps(changed, ensure_ascii=False)})
        index.post(conn, sid, documents)
        total += len(rows)
    if total:
        conn.execute(NEXT_GENERATIONS)
        index.scrub(conn)
        if recorded is None:  # a shard of a release that recorded no signature
            log.info("sqlite store: %s: re-derived the tokens of %d records (%s)", path,
                     total, signature)
        else:
            # Another process may be using the directory under the recorded languages: it
            # would go on answering from terms this one has just replaced.
            log.warning("sqlite store: %s: re-derived the tokens of %d records (%s), written"
                        " under %s: give every process using this directory the same"
                        " release and memory.languages, or each re-derives it in turn",
                        path, total, signature, recorded)
    schema.set_meta(conn, schema.META_FOLDING, signature)
    return total
