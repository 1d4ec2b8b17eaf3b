"""Which file holds a scope, and opening it: naming, identity checks, schema, reindexing.

``scope_file_name`` turns a scope key into a file name that can never leave the data
directory; the file records its scope key and every open checks it, so a renamed or copied
file is refused rather than read as another scope. ``Files._open`` brings a file's schema up
to date and its token index in line with its rows (once per file per store), and writes
nothing when the file needs nothing: the common case, paid whenever a scope comes back into
the cache of open files.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
from collections.abc import Callable
from typing import Any

from scopemem.core.text import normalize_text
from scopemem.core.words import Analyzer
from scopemem.errors import ScopeLimitReached, StoreBusy, StoreError
from scopemem.stores.base import check_scope_key
from scopemem.stores.sqlite import schema, sql

log = logging.getLogger("scopemem.stores.sqlite")

FILE_SUFFIX = ".db"
_READABLE_CHARS = 40
_DIGEST_CHARS = 32
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
# How many pages a scope's WAL may hold before the commit that grows it past them
# checkpoints it (on the pool thread that commits): as many as the database file has, at
# least WAL_MIN_CHECKPOINT_PAGES and at most SQLite's default. A file closed to make room
# keeps its WAL (see ``connect``), so this is also what a closed scope keeps on disk beside
# its database: a fixed 1,000 pages (4 MB) let a 64 KB scope keep a 4 MB log, 40 GB over
# 10,000 scopes, where saves of use counts add two pages each.
WAL_AUTOCHECKPOINT_PAGES = 1000
WAL_MIN_CHECKPOINT_PAGES = 64
MAX_DEFAULT_OPEN = 8192


def scope_file_name(scope_key: str) -> str:
    """The database file name for a scope key: a readable prefix and a digest of the key."""
    digest = hashlib.sha256(scope_key.encode("utf-8")).hexdigest()[:_DIGEST_CHARS]
    readable = _UNSAFE.sub("_", scope_key).strip("_-")[:_READABLE_CHARS].rstrip("_-")
    return f"{readable or 'scope'}-{digest}{FILE_SUFFIX}"



class Files:
    """The data directory's files: where a scope lives, and opening it for use."""

    directory: str
    synchronous: str
    busy_timeout_ms: int
    analyzer: Analyzer
    max_scopes: int
    _clock: Callable[[], int]
    # Database files in the directory, counted once when a limit applies and kept up to
    # date by this store's own creations (see _reserve_scope); None until counted.
    _scope_files: int | None
    # Files whose token index this store has checked against their rows: once per file
    # per store, not on every reopen from the cache of open files.
    _reconciled: set[str]

    def path_for(self, scope_key: str) -> str:
        """The database file holding ``scope_key`` (whether or not it exists yet)."""
        check_scope_key(scope_key)
        name = scope_file_name(scope_key)
        path = os.path.join(self.directory, name)
        separators = [sep for sep in (os.sep, os.altsep) if sep]
        if (name in {"", ".", ".."} or any(sep in name for sep in separators)
                or os.path.dirname(path) != self.directory):
            raise StoreError(f"scope key {scope_key!r} maps outside the data directory")
        return path

    def _reserve_scope(self, path: str) -> None:
        """Count a new scope file about to be created at ``path``, or raise
        ``ScopeLimitReached`` when ``max_scopes`` files exist already. The count is read
        from the directory once, then kept by this store's own creations; it is read again
        before refusing, so files removed (or created by another process) meanwhile are
        seen. The caller holds ``_cache_lock``."""
        if self._scope_files is None or self._scope_files >= self.max_scopes:
            self._scope_files = self._count_scope_files()
        if self._scope_files >= self.max_scopes:
            raise ScopeLimitReached(
                f"sqlite store: the data directory holds {self._scope_files} scopes, the"
                f" limit (max_scopes = {self.max_scopes}); a write to a new scope is refused")
        self._scope_files += 1
        log.debug("sqlite store: new scope file %s (%d of %d)", path, self._scope_files,
                  self.max_scopes)

    def _count_scope_files(self) -> int:
        try:
            with os.scandir(self.directory) as entries:
                return sum(1 for entry in entries
                           if entry.name.endswith(FILE_SUFFIX) and entry.is_file())
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise StoreError(f"sqlite store: cannot read the data directory {self.directory}:"
                             f" {exc.strerror or exc}") from exc

    def _open(self, path: str, scope_key: str) -> Any:
        """Open (creating if needed) one scope's database, refuse it if it is not ours or
        not this scope's, bring its schema up to date and reconcile the token index."""
        apsw = sql.apsw_module()
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"sqlite store: cannot create the data directory"
                             f" {self.directory}: {exc.strerror or exc}") from exc
        flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
        flags |= getattr(apsw, "SQLITE_OPEN_NOFOLLOW", 0)
        try:
            conn = connect(path, flags)
        except apsw.Error as exc:
            raise (descriptors_busy(path, exc)
                   or StoreError(f"sqlite store: cannot open {path}: {sql.describe(exc)}")
                   ) from exc
        try:
            conn.set_busy_timeout(self.busy_timeout_ms)
            identity = self._check_identity(conn, path, scope_key)
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchall()[0][0]
            if str(mode).lower() != "wal":
                raise StoreError(f"sqlite store: {path}: cannot switch to WAL (got {mode})")
            conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            size_checkpoints(conn)
            if not self._is_current(conn, scope_key, identity):
                self._prepare(conn, path, scope_key)
            elif path not in self._reconciled:
                with sql.immediate(conn):  # writes only what is out of step
                    self._reconcile(conn)
            self._reconciled.add(path)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, apsw.Error):
                raise StoreError(f"sqlite store: cannot use {path}: {sql.describe(exc)}"
                                 "; left untouched") from exc
            raise
        return conn

    def _is_current(self, conn: Any, scope_key: str,
                    identity: tuple[int, int, str | None] | None) -> bool:
        """Whether the file needs nothing before use: this scope's, at this schema version,
        indexed under this store's rules (``identity``: what ``_check_identity`` read of it,
        None for a new file). Then opening it writes nothing (no transaction, no sync): the
        common case, paid on the read path whenever a scope comes back into the cache of
        open files, so what was read already is not read again."""
        if identity is None:
            return False
        app_id, version, owner = identity
        return (app_id == schema.APPLICATION_ID and version == schema.SCHEMA_VERSION
                and owner == scope_key
                and schema.stored_meta(conn, schema.META_FOLDING) == self.analyzer.signature)

    def _prepare(self, conn: Any, path: str, scope_key: str) -> None:
        """Create or migrate the schema, claim the file for the scope, re-derive its terms
        and reconcile the index, in one write transaction."""
        with sql.immediate(conn):
            schema.apply_schema(conn, self._clock())
            owner = schema.claim_scope(conn, scope_key)
            if owner != scope_key:
                raise StoreError(f"sqlite store: {path} holds scope {owner!r},"
                                 f" not {scope_key!r}; left untouched")
            self._refold(conn, path)
            self._reconcile(conn)

    @staticmethod
    def _check_identity(conn: Any, path: str, scope_key: str
                        ) -> tuple[int, int, str | None] | None:
        """Read-only checks before anything is written: the file is a SQLite database, ours
        (or empty), of a schema version we understand, and this scope's. What it read (the
        application id, the schema version, the scope key it holds), or None for a new
        file."""
        apsw = sql.apsw_module()
        try:
            app_id = schema.pragma(conn, "application_id")
            # Only a file without our id needs its tables counted (to tell a new one).
            tables = schema.table_count(conn) if app_id != schema.APPLICATION_ID else -1
        except (apsw.NotADBError, apsw.CorruptError) as exc:
            raise StoreError(f"sqlite store: {path} is not a SQLite database or is corrupt"
                             f" ({sql.describe(exc)}); left untouched") from exc
        if app_id == 0 and tables == 0:
            return None  # a new (or never initialized) file
        if app_id != schema.APPLICATION_ID:
            raise StoreError(f"sqlite store: {path} is a SQLite database of another"
                             " application; left untouched")
        version = schema.pragma(conn, "user_version")
        if version > schema.SCHEMA_VERSION:
            raise StoreError(f"sqlite store: {path} has schema version {version}, newer than"
                             f" this scopemem understands ({schema.SCHEMA_VERSION})")
        owner = schema.stored_scope(conn) if schema.has_table(conn, "meta") else None
        if owner is not None and owner != scope_key:
            raise StoreError(f"sqlite store: {path} holds scope {owner!r}, not {scope_key!r};"
                             " left untouched")
        return app_id, version, owner

    def _refold(self, conn: Any, path: str) -> None:
        """Re-derive what the file keeps from the text by the tokenizing rules and languages
        (``Analyzer.signature``): every row's dedup key and the active rows' indexed terms,
        once, inside the open's transaction, when the file was written under other rules (or
        none recorded: before Unicode folding). Rows, ids, statuses and use counts are
        untouched."""
        signature = self.analyzer.signature
        if schema.stored_meta(conn, schema.META_FOLDING) == signature:
            return
        rows = conn.execute("SELECT seq, text, keywords, status FROM records").fetchall()
        conn.executemany("UPDATE records SET norm = ? WHERE seq = ?",
                         [(normalize_text(text), seq) for seq, text, _kw, _status in rows])
        conn.execute("DELETE FROM records_fts")
        conn.executemany("INSERT INTO records_fts (rowid, tokens) VALUES (?, ?)",
                         [(seq, sql.fts_tokens(text, json.loads(keywords), self.analyzer))
                          for seq, text, keywords, status in rows if status == "active"])
        schema.set_meta(conn, schema.META_FOLDING, signature)
        conn.execute(schema.NEXT_GENERATION_SQL)
        if rows:
            log.info("sqlite store: %s: re-derived the tokens of %d records (%s)", path,
                     len(rows), signature)

    def _reconcile(self, conn: Any) -> None:
        """Make the token index hold exactly the active rows: drop entries of rows that are
        no longer active (or gone) and index active rows that are missing."""
        conn.execute("DELETE FROM records_fts WHERE rowid NOT IN"
                     " (SELECT seq FROM records WHERE status = 'active')")
        missing = conn.execute(
            "SELECT seq, text, keywords FROM records WHERE status = 'active'"
            " AND seq NOT IN (SELECT rowid FROM records_fts)").fetchall()
        for seq, text, keywords in missing:
            conn.execute("INSERT INTO records_fts (rowid, tokens) VALUES (?, ?)",
                         (seq, sql.fts_tokens(text, json.loads(keywords), self.analyzer)))
        if missing:
            log.warning("sqlite store: re-indexed %d active records", len(missing))
        sql.compact_index(conn)


def checkpoint_pages(database_pages: int) -> int:
    """The WAL's auto-checkpoint size for a database of ``database_pages`` pages."""
    return min(WAL_AUTOCHECKPOINT_PAGES, max(WAL_MIN_CHECKPOINT_PAGES, database_pages))


def size_checkpoints(conn: Any) -> None:
    """Set the connection's auto-checkpoint size by its database's size now: on open, and
    by each write before it commits (a scope that grows while open checkpoints as seldom
    as its size allows)."""
    conn.wal_autocheckpoint(checkpoint_pages(schema.pragma(conn, "page_count")))


def default_max_open() -> int:
    """How many scope files may be open at once by default: a sixth of the process's soft
    open-file limit (an open scope holds three descriptors: the database, its WAL and its
    shared memory; the worker keeps half the limit for its network connections), at least
    16 and at most 8,192."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return MAX_DEFAULT_OPEN
    return max(16, min(MAX_DEFAULT_OPEN, soft // 6))


def descriptors_busy(path: str, exc: BaseException) -> StoreBusy | None:
    """What SQLite failing to open ``path`` (or its WAL) is when the process has no file
    descriptor left: ``StoreBusy``, which the worker answers 503 with ``Retry-After``; None
    when it is not that."""
    if isinstance(exc, sql.apsw_module().CantOpenError) and out_of_descriptors():
        return StoreBusy(f"sqlite store: cannot open {path} now: the process has no "
                         "file descriptor left")
    return None


def out_of_descriptors() -> bool:
    """Whether the process cannot open one more file (EMFILE/ENFILE): what a ``CantOpen``
    means when the directory and the path are fine."""
    try:
        fd = os.open(os.devnull, os.O_RDONLY)
    except OSError as exc:
        return exc.errno in (errno.EMFILE, errno.ENFILE)
    os.close(fd)
    return False


def connect(path: str, flags: int | None = None) -> Any:
    """An apsw connection to ``path`` (read-write, not creating, unless ``flags`` say
    otherwise) with ``secure_delete`` on: whatever SQLite frees (a forgotten row's cells, a
    purged row, a merged index segment) is overwritten with zeros, in the tables and in the
    FTS5 shadow tables alike; and no checkpoint on close. Every connection the store opens is
    made here."""
    apsw = sql.apsw_module()
    conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READWRITE if flags is None else flags)
    try:
        conn.execute("PRAGMA secure_delete = ON")
        # Closing does not checkpoint: every commit is already durable in the WAL (synced
        # as ``synchronous`` says), and a checkpoint on close (two syncs and an unlink of the
        # WAL) made every eviction from the open-connection cache cost a millisecond, paid
        # on the read path when many scopes take turns. The WAL is checkpointed as writes
        # grow it past the file's size (``size_checkpoints``) and stays on disk.
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    except BaseException:
        conn.close()
        raise
    return conn
