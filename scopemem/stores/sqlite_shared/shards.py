"""Opening the shard files: a connection per shard per pool thread (``threading.local``:
never shared, so no lock guards it), each shard checked once (``docs/storage.md``, "The
shared SQLite layout").

The first connection of the process to a shard checks the file is that shard of this store,
brings its schema up to date and re-derives its terms if they follow another analyzer
(``refold``), in one ``BEGIN IMMEDIATE`` transaction, before any copy of a scope of it is
read; a thread opening the shard meanwhile waits for that check. A re-derivation keeps rows,
ids, statuses, use counts and each document's ``continues`` marker (its predecessor's row
may be gone), and moves every scope's change counter, so no copy of the old terms is used
again.
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
        conns: dict[int, tuple[Any, DueCheckpoint]] | None = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        held = conns.get(index)
        if held is not None:
            return held[0]
        if not create and not self.exists(index):
            return None
        conn = self._open(index, create=create)
        conns[index] = (conn, DueCheckpoint(conn))
        return conn

    def count_scopes(self, index: int) -> int:
        """The scopes shard ``index`` holds (0: no file or no tables yet), read without
        taking a lock: before the shard is checked, through a connection of its own (the
        check takes the shard's write lock, and two writers counting each other's shard
        inside their transactions would wait on each other)."""
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
            raise _failed(path, exc, "cannot open ") from exc
        try:
            conn.set_busy_timeout(self.busy_timeout_ms)
            if not conn.execute("SELECT 1 FROM sqlite_schema WHERE type = 'table'"
                                " AND name = 'scopes'").fetchall():
                return 0
            return int(conn.execute(SQL.count_scopes).fetchall()[0][0])
        except apsw.Error as exc:
            raise _failed(path, exc) from exc
        finally:
            conn.close()

    def checkpoint_due(self, index: int) -> bool:
        """Whether a commit on this thread's connection to shard ``index`` made a
        checkpoint due since the last call (``DueCheckpoint``)."""
        held = getattr(self._local, "conns", {}).get(index)
        return held is not None and bool(held[1].take())

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
            raise _failed(path, exc, "cannot open ") from exc
        try:
            if first is not None and first.identity != opened.identity:
                raise first.refusal("was replaced by another file")
            opened.install(conn)
            conn.set_busy_timeout(self.busy_timeout_ms)
            conn.execute("PRAGMA secure_delete = ON")
            # Plans made without the values bound: a statement whose plan SQLite fits to
            # them (a bound LIMIT, a UNION) was prepared again at every run, five of a
            # write's at the cap and a retrieval's, a fifth of their CPU at 500 records.
            conn.config(apsw.SQLITE_DBCONFIG_ENABLE_QPSG, 1)
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
            raise _failed(path, exc) from exc
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
        refused when deleted or replaced (its shards' writes would start from nothing)."""
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
        """Switch to WAL mode, trying again within the busy timeout: two connections
        switching a new file at once get SQLITE_BUSY without the busy handler asked."""
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


def _failed(path: str, exc: Exception, doing: str = "") -> StoreError:
    """apsw's error on ``path`` as the store's (too few descriptors said as such)."""
    return descriptors_busy(path, exc) or StoreError(
        f"sqlite store: {doing}{path}: {sqlite_sql.describe(exc)}")


class DueCheckpoint:
    """A connection's WAL hook in place of SQLite's automatic checkpoint: it notes that a
    commit made one due, and the shard's writing thread runs it after the write
    (``ShardPools.write``), so that write does not wait for it (5-10 ms on a large shard)."""

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
    """The passive checkpoint SQLite's automatic one would have run (one that cannot be
    done now is done at a later commit, as SQLite's own)."""
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
    """Re-derive the shard's dedup keys and terms under ``analyzer`` unless they follow it,
    and record its signature; the rows re-derived. The caller holds a write transaction."""
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
