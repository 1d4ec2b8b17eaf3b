"""Moving a data directory of the retired file layout (a SQLite file per scope, read through
``legacy.py``) into the shared layout, once, when the store opens it (``docs/sqlite-store.md``,
"Migration from the file layout", has what is kept and the steps). Records are copied below
the import screen: nothing is redacted, swept or re-sourced.

The steps run under an exclusive ``fcntl.flock`` on ``LOCK``: the shards are built and
checked in ``BUILDING`` (the scope files only read), which is renamed ``BUILT`` (the one
atomic step: a crash before it starts again, after it finishes); then the scope files move
into ``BUILT/file-layout/``, the shards into the directory, and ``BUILT/file-layout/`` to the
backup folder named when building, each rename at most once. Until every shard is in place
the directory holds scope files or ``BUILT``, so an opener that finds neither has nothing to
wait for.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from scopemem.core.records import CountRow, Record
from scopemem.core.words import Analyzer
from scopemem.errors import StoreError
from scopemem.stores.sqlite_shared import legacy as file_schema
from scopemem.stores.sqlite_shared import schema
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared.legacy import connect, is_scope_file, scope_file_name
from scopemem.stores.sqlite_shared.porting import import_scope
from scopemem.stores.sqlite_shared.shards import Shards
from scopemem.stores.sqlite_shared.usage import PendingUses
from scopemem.stores.sqlite_shared.writes import add_rows

__all__ = ["BACKUP", "BUILDING", "BUILT", "LOCK", "migrate_file_layout"]

log = logging.getLogger("scopemem.stores.sqlite")

LOCK = ".scopemem-migration.lock"
BUILDING = ".scopemem-migration.tmp"
BUILT = ".scopemem-migration.done"
BACKUP = "file-layout-backup"
_OLD = "file-layout"  # inside BUILT, until it becomes the backup folder
_SUMMARY = "summary.json"
_SIDE_FILES = ("", "-wal", "-shm", "-journal")

_ROWS = f"SELECT {schema.RECORD_COLUMNS}, retired_at FROM records ORDER BY seq"
_COUNTERS = "SELECT day, name, value FROM counters ORDER BY day, name"
_NEW_ROWS = (f"SELECT {schema.RECORD_COLUMNS}, retired_at FROM records"
             " WHERE scope_key = ? ORDER BY seq")
_NEW_COUNTERS = "SELECT day, name, value FROM counters WHERE scope_key = ? ORDER BY day, name"
_SET_RETIRED = "UPDATE records SET retired_at = ? WHERE scope_key = ? AND seq = ?"
_SET_LAST_SEQ = "UPDATE scopes SET last_seq = max(last_seq, ?) WHERE scope_key = ?"
_LAST_SEQ = "SELECT last_seq FROM scopes WHERE scope_key = ?"


@attrs.frozen
class _Scope:
    """A scope file's rows (seq, record, ``retired_at``), highest id given and counters."""

    key: str
    rows: list[tuple[int, Record, int | None]]
    last_seq: int
    counters: list[tuple[int, str, int]]


def migrate_file_layout(directory: str, *, analyzer: Analyzer, clock: Callable[[], int],
                        shards: int = schema.SHARDS) -> None:
    """Migrate ``directory`` if it holds the file layout's scope files (or an interrupted
    migration); ``StoreError`` when it cannot (the old files kept, the next call tries)."""
    if not _pending(directory):
        return
    apsw = sqlite_sql.apsw_module()
    try:
        summary, interrupted = _migrate(directory, analyzer, clock, shards)
    except (OSError, apsw.Error, _Unbuilt) as exc:
        why = (exc.strerror or exc if isinstance(exc, OSError)
               else exc if isinstance(exc, _Unbuilt) else sqlite_sql.describe(exc))
        raise StoreError(f"sqlite store: migrating {directory} to the shared layout failed:"
                         f" {why}; the old files are kept, and the next open tries again"
                         ) from exc
    if summary is None:
        return
    # A warning: it changed the directory, and leaves a folder for the operator to remove.
    skipped = summary.get("skipped", [])
    log.warning("sqlite store: migrated %s from the file layout to the shared layout%s:"
                " %d scopes, %d records, %d counter rows%s; the old files are in %s (remove"
                " that folder once you no longer need them)", directory,
                " (finishing an interrupted migration)" if interrupted else "",
                summary.get("scopes", 0), summary.get("records", 0),
                summary.get("counters", 0),
                f"; skipped (kept in the backup): {', '.join(skipped)}" if skipped else "",
                os.path.join(directory, summary.get("backup", BACKUP)))


def _migrate(directory: str, analyzer: Analyzer, clock: Callable[[], int], shards: int
             ) -> tuple[dict[str, Any] | None, bool]:
    """The steps, under the lock: the summary (None: nothing left to do) and whether they
    finished an interrupted migration."""
    with _locked(directory):
        names = os.listdir(directory)
        built = os.path.join(directory, BUILT)
        interrupted = BUILT in names
        if not interrupted:
            if not any(is_scope_file(name) for name in names):
                shutil.rmtree(os.path.join(directory, BUILDING), ignore_errors=True)
                return None, False  # another process migrated it while this one waited
            if any(name.startswith("shard-") and name.endswith(".db") for name in names):
                raise StoreError(
                    f"sqlite store: {directory} holds both scope files (the file layout) and"
                    " shard files (the shared layout); move one set out of it")
            held = next((name for name in sorted(names) if is_scope_file(name)
                         and _open_elsewhere(os.path.join(directory, name))), None)
            if held is not None:
                raise StoreError(
                    f"sqlite store: cannot migrate {directory} from the file layout:"
                    f" {os.path.join(directory, held)} is open in another process (a scopemem"
                    " of an older release still running?); stop every process using the"
                    " directory, then open it again (nothing was moved)")
            building = os.path.join(directory, BUILDING)
            try:
                _build(directory, building, analyzer, clock(), shards)
            except BaseException:
                shutil.rmtree(building, ignore_errors=True)
                raise
            os.rename(building, built)
            _sync_dir(directory)
        summary = _finish(directory, built)
        os.unlink(os.path.join(directory, LOCK))
    return summary, interrupted


def _pending(directory: str) -> bool:
    try:
        with os.scandir(directory) as entries:
            return any(is_scope_file(e.name) or e.name in (BUILT, BUILDING) for e in entries)
    except (FileNotFoundError, NotADirectoryError):
        return False


def _open_elsewhere(path: str) -> bool:
    """Whether another process has the scope file open: a connection to a WAL database
    holds a shared lock while open, so an exclusive lock asked for without waiting is
    refused. The probe writes nothing."""
    apsw = sqlite_sql.apsw_module()
    conn = connect(path)
    try:
        conn.set_busy_timeout(0)
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("ROLLBACK")
    except apsw.BusyError:
        return True
    finally:
        conn.close()
    return False


@contextlib.contextmanager
def _locked(directory: str) -> Iterator[None]:
    fd = os.open(os.path.join(directory, LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("sqlite store: another process is migrating %s; waiting for it",
                     directory)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _build(directory: str, building: str, analyzer: Analyzer, now: int, shards: int) -> None:
    """The shard files in ``building``, checked and synced, and the summary."""
    shutil.rmtree(building, ignore_errors=True)
    scratch = os.path.join(building, "upgrade")
    os.makedirs(scratch)
    names = sorted(name for name in os.listdir(directory) if is_scope_file(name))
    target = Shards(building, analyzer=analyzer, shards=shards, synchronous="off")
    uses = PendingUses(shards)
    migrated: dict[str, int] = {}
    skipped: list[str] = []
    counters = 0
    try:
        for name in names:
            scope = _read_scope_file(os.path.join(directory, name), scratch, now)
            if scope is None:
                skipped.append(name)
                continue
            shard = target.of(scope.key)
            try:
                conn = target.connection(shard, create=True)
            except StoreError as exc:  # a shard it cannot create: a full disk, say
                raise _Unbuilt(str(exc).removeprefix("sqlite store: ")) from exc
            _copy(conn, uses, shard, analyzer, scope, now)
            _check(conn, scope)
            migrated[scope.key] = len(scope.rows)
            counters += len(scope.counters)
    finally:
        target.close()
    shutil.rmtree(scratch)
    _check_reopened(building, analyzer, shards, migrated)
    for name in os.listdir(building):
        _sync_file(os.path.join(building, name))
    _write_summary(building, {
        "scopes": len(migrated), "records": sum(migrated.values()), "counters": counters,
        "skipped": skipped, "backup": _free_name(directory, BACKUP)})
    _sync_dir(building)


def _read_scope_file(path: str, scratch: str, now: int) -> _Scope | None:
    """The scope file's rows, next id and counters; None (with a warning) for a file the
    file layout would never read as its scope; ``StoreError`` for one not scopemem's or
    newer than this release. An older schema is upgraded in a copy in ``scratch``."""
    apsw = sqlite_sql.apsw_module()
    try:
        conn = connect(path, apsw.SQLITE_OPEN_READONLY)
    except apsw.Error as exc:
        raise _refused(path, sqlite_sql.describe(exc)) from exc
    try:
        app_id = schema.pragma(conn, "application_id")
        version = schema.pragma(conn, "user_version")
        if app_id == 0 and schema.table_count(conn) == 0:
            log.warning("sqlite store: migration skips %s: an empty file", path)
            return None
        if app_id != file_schema.APPLICATION_ID:
            raise _refused(path, "not a scope file of scopemem")
        if version > file_schema.SCHEMA_VERSION:
            raise _refused(path, f"schema version {version}, newer than this scopemem's")
        if version < file_schema.SCHEMA_VERSION:
            conn.close()
            conn = _upgraded_copy(path, scratch, now)
        key = schema.stored_meta(conn, file_schema.META_SCOPE_KEY)
        if key is None or scope_file_name(key) != os.path.basename(path):
            log.warning("sqlite store: migration skips %s: it holds scope %r, whose file is"
                        " another (a copied or renamed file, which the file layout never"
                        " read)", path, key)
            return None
        rows = [(row[0], sqlite_sql.record(row), row[16]) for row in conn.execute(_ROWS)]
        last_seq = conn.execute(file_schema.NEXT_SEQ_SQL).fetchall()[0][0] - 1
        counters = [(day, name, value) for day, name, value in conn.execute(_COUNTERS)]
        return _Scope(key, rows, last_seq, counters)
    except apsw.Error as exc:
        raise _refused(path, sqlite_sql.describe(exc)) from exc
    finally:
        conn.close()


def _upgraded_copy(path: str, scratch: str, now: int) -> Any:
    """A copy of an older scope file in ``scratch`` with its schema brought up to date."""
    copy = os.path.join(scratch, os.path.basename(path))
    for suffix in _SIDE_FILES[:2]:
        if os.path.exists(path + suffix):
            shutil.copyfile(path + suffix, copy + suffix)
    conn = connect(copy)
    with sqlite_sql.immediate(conn):
        file_schema.apply_schema(conn, now)
    return conn


class _Unbuilt(Exception):
    """A shard file the migration builds could not be created or written."""


def _refused(path: str, why: str) -> StoreError:
    return StoreError(f"sqlite store: cannot migrate {path} to the shared layout: {why}; no"
                      " file was changed (move it out of the directory)")


def _copy(conn: Any, uses: PendingUses, shard: int, analyzer: Analyzer, scope: _Scope,
          now: int) -> None:
    """The scope's rows, next id and counters into its shard."""
    import_scope(conn, uses, shard, analyzer, scope.key,
                 [(seq, record) for seq, record, _retired in scope.rows], now)
    with sqlite_sql.immediate(conn):
        conn.executemany(_SET_RETIRED, [(retired, scope.key, seq)
                                        for seq, _record, retired in scope.rows])
        conn.execute(_SET_LAST_SEQ, (scope.last_seq, scope.key))
        add_rows(conn, [CountRow(scope.key, day, name, value)
                        for day, name, value in scope.counters])


def _check(conn: Any, scope: _Scope) -> None:
    """The scope as its shard holds it now is the scope as its file held it."""
    rows = [(row[0], sqlite_sql.record(row), row[16])
            for row in conn.execute(_NEW_ROWS, (scope.key,))]
    counters = [tuple(row) for row in conn.execute(_NEW_COUNTERS, (scope.key,))]
    last_seq = conn.execute(_LAST_SEQ, (scope.key,)).fetchall()[0][0]
    for what, new, old in (("records", rows, scope.rows), ("next id", last_seq,
                           scope.last_seq), ("counters", counters, scope.counters)):
        if new != old:
            raise StoreError(f"sqlite store: migrating {scope.key!r} to the shared layout: its"
                             f" {what} read back differ from its file's; no file was changed")


def _check_reopened(building: str, analyzer: Analyzer, shards: int,
                    migrated: dict[str, int]) -> None:
    """Opened afresh, the shard files hold every scope migrated and its record count."""
    reopened = Shards(building, analyzer=analyzer, shards=shards)
    held: dict[str, int] = {}
    try:
        for index in range(shards):
            conn = reopened.connection(index, create=False)
            if conn is not None:
                held.update(conn.execute(
                    "SELECT scope_key, (SELECT count(*) FROM records AS r"
                    " WHERE r.scope_key = s.scope_key) FROM scopes AS s").fetchall())
    finally:
        reopened.close()
    if held != migrated:
        raise StoreError("sqlite store: the shard files built by the migration to the shared"
                         " layout do not hold every scope migrated; no file was changed")


def _finish(directory: str, built: str) -> dict[str, Any]:
    """The renames (each at most once, so an interrupted finish runs again); the summary."""
    with open(os.path.join(built, _SUMMARY), encoding="utf-8") as source:
        summary: dict[str, Any] = json.load(source)
    old = os.path.join(built, _OLD)
    backup = os.path.join(directory, summary.get("backup", BACKUP))
    if not os.path.exists(backup):
        os.makedirs(old, exist_ok=True)
        for name in os.listdir(directory):
            if is_scope_file(name):
                for suffix in _SIDE_FILES:
                    with contextlib.suppress(FileNotFoundError):
                        os.rename(os.path.join(directory, name + suffix),
                                  os.path.join(old, name + suffix))
        _sync_dir(old)
        _sync_dir(directory)
        for name in sorted(os.listdir(built)):
            if name.startswith("shard-"):
                os.rename(os.path.join(built, name), os.path.join(directory, name))
        _sync_dir(directory)
        os.rename(old, backup)
        _sync_dir(directory)
    if any(name.startswith("shard-") for name in os.listdir(built)):
        raise StoreError(f"sqlite store: {built}: shard files left behind by the migration"
                         " to the shared layout; move them into the directory")
    shutil.rmtree(built)
    _sync_dir(directory)
    return summary


def _free_name(directory: str, name: str) -> str:
    taken = set(os.listdir(directory))
    n = 1
    while (candidate := name if n == 1 else f"{name}-{n}") in taken:
        n += 1
    return candidate


def _write_summary(building: str, summary: dict[str, Any]) -> None:
    path = os.path.join(building, _SUMMARY)
    with open(path, "w", encoding="utf-8") as out:
        json.dump(summary, out)
        out.flush()
        os.fsync(out.fileno())


def _sync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_sync_dir = _sync_file  # a folder's entries: the same call
