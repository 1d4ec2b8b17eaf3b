"""What the SQLite store reads and writes of a row, and how it meets apsw: rows to records,
transactions, errors.

Pure functions over an apsw connection or a row tuple (``schema.RECORD_COLUMNS``), used by
every part of the store; nothing here holds state.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

from scopemem.core.records import Record, stored_record_problem, trusted_record
from scopemem.core.text import normalize_text
from scopemem.errors import StoreBusy
from scopemem.stores.shared.sql import foreign_row

#: ``json.dumps(value, ensure_ascii=False)`` with its encoder made once (``json.dumps`` makes
#: one a call when given an option, as much work as encoding a short list): how the store
#: binds lists, JSON its statements read with ``json_each``.
dumps = json.JSONEncoder(ensure_ascii=False).encode


def apsw_module() -> Any:
    import apsw  # deferred: listing plugins must not pay for loading SQLite

    return apsw


def record(row: Sequence[Any]) -> Record:
    """The record of a row of ``RECORD_COLUMNS`` (columns after those are ignored). A row
    that is not a record the store writes (written into the shard by another program) is a
    ``StoreError`` naming it (``records.stored_record_problem``)."""
    keywords = row[5]
    try:
        words: Any = json.loads(keywords) if keywords != "[]" else ()
        if not isinstance(words, list | tuple):
            raise ValueError("not a JSON list")
        # Each column by index (not slices unpacked): a type checker can count them.
        made = trusted_record(row[1], row[2], row[3], row[4], tuple(words),
                              row[6], row[7], row[8], row[9], row[10], row[11], row[12],
                              row[13], row[14], row[15])
    except (TypeError, ValueError, RecursionError) as exc:
        raise foreign_row(row, f"keywords: {exc}", "shard") from None
    problem = stored_record_problem(made)
    if problem is not None:
        raise foreign_row(row, problem, "shard")
    return made


def last_touched(row: Sequence[Any]) -> int:
    """``Record.last_touched`` of a row of ``RECORD_COLUMNS`` without making the record (a
    ranking reads it of every row it weighs): a time that is no integer is a ``StoreError``
    naming the row, as ``record`` would make it."""
    touched = row[8] if row[9] is None else row[9]
    if type(touched) is not int:
        raise foreign_row(row, f"created_at/last_used_at: {touched!r} is not a time", "shard")
    return touched


def insert_row(seq: int, r: Record, now: int, tokens: Sequence[str]) -> tuple[Any, ...]:
    """A row of ``statements.INSERT_ROWS`` for record ``r`` (retired ``now`` when it is not
    active) and the tokens its row keeps (none when it is not active)."""
    return (seq, r.id, r.kind.value, r.text, normalize_text(r.text),
            dumps(list(r.keywords)) if r.keywords else "[]", r.source_thread_key,
            r.source_run_id, r.created_at, r.last_used_at, r.use_count, r.confidence,
            r.supersedes, r.restates, r.status.value, r.source.value,
            None if r.is_active else now, " ".join(tokens) if r.is_active else "")


@contextlib.contextmanager
def snapshot(conn: Any) -> Iterator[None]:
    """A read transaction: every statement in the block reads the same committed state."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        if not conn.getautocommit():
            conn.execute("COMMIT")


@contextlib.contextmanager
def immediate(conn: Any) -> Iterator[None]:
    """A plain ``BEGIN IMMEDIATE`` transaction: committed if the block finishes, rolled back
    if it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if not conn.getautocommit():
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def fetch(conn: Any, statement: str, params: dict[str, Any]) -> list[Any]:
    return list(conn.execute(statement, params).fetchall())


def truncate_wal(conn: Any, path: str, after: str) -> None:
    """No page image of what was scrubbed stays in the WAL (secure_delete zeroed it in
    the database file once checkpointed)."""
    busy, _log, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0]
    if busy:
        logging.getLogger("scopemem.stores.sqlite").warning(
            "sqlite store: %s: a reader holds an old snapshot; the WAL could not be"
            " truncated after %s (later commits overwrite it)", path, after)


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def descriptors_busy(path: str, exc: BaseException) -> StoreBusy | None:
    """What SQLite failing to open ``path`` (or its WAL) is when the process has no file
    descriptor left: ``StoreBusy``, which the worker answers 503 with ``Retry-After``; None
    when it is not that."""
    if isinstance(exc, apsw_module().CantOpenError) and out_of_descriptors():
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
