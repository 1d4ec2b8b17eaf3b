"""Moving records in and out of the SQLite store (``stores.porting.PortableStore``).

``export_scopes`` lists the data directory's database files and reads each one's scope key
from the file itself (``meta``), never from its name; a file that is not ours, or whose key
maps to another file name (a copied or renamed file, which the store would refuse to open as
that scope), is skipped with a warning. ``export_page`` reads rows in seq order, pending use
counts applied. ``import_records`` writes each scope's records in one ``BEGIN IMMEDIATE``
transaction under the scope's writer lock: rows keep their seq (the rowid), so the next id
(``schema.NEXT_SEQ_SQL``, the highest seq plus one) stays above every imported one; only
active rows enter the token index; a dead row's retention counts from the import; the
transaction counts a generation, so no in-memory view answers from the rows before it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from scopemem.core.records import Record
from scopemem.stores.porting import group_import
from scopemem.stores.sqlite import schema, sql
from scopemem.stores.sqlite.base import StoreBase
from scopemem.stores.sqlite.files import FILE_SUFFIX, connect, scope_file_name

log = logging.getLogger("scopemem.stores.sqlite")


class Porting(StoreBase):
    """Export and import; ``_insert`` comes from ``writes.Writes``."""

    _insert: Any

    async def export_scopes(self) -> list[str]:
        return await self._run("read", self._scope_keys)

    async def export_page(self, scope_key: str, after: int, limit: int) -> list[Record]:
        self.path_for(scope_key)  # checks the key
        if limit <= 0:
            return []
        return await self._run("read", self._export_page, scope_key, after, limit)

    async def import_records(self, records: Sequence[Record]) -> int:
        now = self._clock()
        groups = group_import(records, now)
        added = 0
        for scope_key, batch in groups.items():
            async with self._writer(scope_key):
                added += await self._run("write", self._import, scope_key, batch, now)
        return added

    def _scope_keys(self) -> list[str]:
        try:
            with os.scandir(self.directory) as entries:
                names = sorted(entry.name for entry in entries
                               if entry.name.endswith(FILE_SUFFIX) and entry.is_file())
        except FileNotFoundError:
            return []
        apsw = sql.apsw_module()
        keys = []
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                conn = connect(path, apsw.SQLITE_OPEN_READONLY)
            except apsw.Error as exc:
                log.warning("sqlite store: export skips %s: %s", path, sql.describe(exc))
                continue
            try:
                ours = schema.pragma(conn, "application_id") == schema.APPLICATION_ID
                key = schema.stored_scope(conn) if ours else None
            except apsw.Error as exc:
                log.warning("sqlite store: export skips %s: %s", path, sql.describe(exc))
                continue
            finally:
                conn.close()
            if key is None:
                log.warning("sqlite store: export skips %s: not a scope file of scopemem", path)
            elif scope_file_name(key) != name:
                log.warning("sqlite store: export skips %s: it holds scope %r, whose file is"
                            " %s (a copied or renamed file)", path, key, scope_file_name(key))
            else:
                keys.append(key)
        return sorted(keys)

    def _export_page(self, scope_key: str, after: int, limit: int) -> list[Record]:
        with self._connection(scope_key, create=False) as handle:
            if handle is None:
                return []
            rows = handle.conn.execute(
                f"SELECT {schema.RECORD_COLUMNS} FROM records WHERE seq > ?"
                " ORDER BY seq LIMIT ?", (after, limit)).fetchall()
            return [sql.record(row) for row in sql.with_bumps(rows, handle.pending_copy())]

    def _import(self, scope_key: str, batch: list[tuple[int, Record]], now: int) -> int:
        with self._connection(scope_key, create=True) as handle:
            conn = handle.conn
            seqs = [seq for seq, _record in batch]
            held: set[int] = set()
            for start in range(0, len(seqs), sql.CHUNK):
                chunk = seqs[start:start + sql.CHUNK]
                held.update(seq for (seq,) in conn.execute(
                    f"SELECT seq FROM records WHERE seq IN ({', '.join('?' * len(chunk))})",
                    chunk))
            fresh = [(seq, record) for seq, record in batch if seq not in held]
            if not fresh:
                return 0  # no transaction: the scope's view stays
            with self._transaction(conn, bumps=handle):
                for seq, record in fresh:
                    self._insert(conn, record, seq,
                                 retired_at=None if record.is_active else now)
                sql.compact_index(conn)
        return len(fresh)
