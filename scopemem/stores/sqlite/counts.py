"""The SQLite store's counters (``stores.base.CountingStore``): a ``counters`` table in each
scope's own file, keyed by UTC day and name (schema migration 5).

A write batch, a forget and a sweep add their counts in their own transaction
(``add_rows``, called from ``writes.Writes``), so the counts and the rows commit together or
not at all. ``add_counts`` (the host's counts: reflection's offers and rejections, the
records a prompt showed) arrives already batched by the host and is committed like a usage
save: one job on the write pool for every scope of the call, each scope one transaction that
does not wait for the disk (the counts are advisory; losing the last second of them to a
power cut costs nothing else). Counters live in the scope's file, so deleting a person's
file deletes their counts too.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from scopemem.core.records import CountRow
from scopemem.errors import ScopeLimitReached, StoreError
from scopemem.stores.base import check_scope_key
from scopemem.stores.shared import counts as counting
from scopemem.stores.sqlite import schema
from scopemem.stores.sqlite.base import StoreBase

log = logging.getLogger("scopemem.stores.sqlite")


def add_rows(conn: Any, rows: Sequence[CountRow]) -> None:
    """Add ``rows`` (all of the file's scope) inside the caller's transaction."""
    if rows:
        conn.executemany(schema.ADD_COUNT_SQL, [(row.day, row.name, row.value) for row in rows])


class Counts(StoreBase):
    """``add_counts`` and ``read_counts``; ``_scope_keys`` comes from ``porting.Porting``."""

    _scope_keys: Any

    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        checked = counting.check_rows(rows)
        if not checked:
            return
        grouped: dict[str, list[CountRow]] = {}
        for row in checked:
            grouped.setdefault(row.scope_key, []).append(row)
        failed = await self._run("write", self._add_counts, grouped)
        for _scope_key, exc in failed:
            if isinstance(exc, ScopeLimitReached):  # a new scope past max_scopes: a 507
                raise exc
        if failed:
            scope_key, exc = failed[0]
            raise StoreError(f"sqlite store: counters of {len(failed)} scope(s) not saved"
                             f" ({scope_key}: {exc})")

    def _add_counts(self, grouped: dict[str, list[CountRow]]
                    ) -> list[tuple[str, StoreError]]:
        """On the write pool: each scope's rows in a transaction of its own (creating the
        scope's file when it has none, against ``max_scopes``: its counts are its data).
        The scopes that failed, with why; the others are saved."""
        failed: list[tuple[str, StoreError]] = []
        for scope_key, rows in grouped.items():
            try:
                with self._connection(scope_key, create=True) as handle, \
                        self._transaction(handle.conn, relaxed=True, bumps=handle):
                    add_rows(handle.conn, rows)
            except StoreError as exc:
                failed.append((scope_key, exc))
        return failed

    async def read_counts(self, scope_keys: Sequence[str] | None = None, *,
                          prefix: str | None = None, since_day: int = 0) -> list[CountRow]:
        if scope_keys is not None:
            keys = sorted({check_scope_key(key) for key in scope_keys})
        else:
            keys = await self._run("read", self._scope_keys)
        keys = [key for key in keys if counting.select_scope(key, None, prefix)]
        if not keys:
            return []
        return await self._run("read", self._read_counts, keys, since_day)

    def _read_counts(self, keys: Sequence[str], since_day: int) -> list[CountRow]:
        rows: list[CountRow] = []
        for scope_key in keys:
            with self._connection(scope_key, create=False) as handle:
                if handle is None:
                    continue
                rows.extend(CountRow(scope_key, day, name, value) for day, name, value
                            in handle.conn.execute(schema.READ_COUNTS_SQL, (since_day,)))
        return rows
