"""Moving records in and out of the shared-file SQLite store (``stores.porting``: what an
export and an import promise; ``import_threads``: the postings' ``continues`` flags).

``export_page`` reads rows with the pending use counts applied, so an export shows the
counts as of now. ``import_records`` writes each scope's records in one ``BEGIN IMMEDIATE``
transaction behind the shard's writers, as a write.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from scopemem.core.records import Record
from scopemem.core.words import Analyzer
from scopemem.errors import StoreRefused
from scopemem.stores.base import Clock, check_scope_key
from scopemem.stores.porting import group_import, import_threads
from scopemem.stores.shared.tokens import index_tokens
from scopemem.stores.sqlite_shared import index
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared import statements as st
from scopemem.stores.sqlite_shared.dialect import SQL
from scopemem.stores.sqlite_shared.pools import ShardPools
from scopemem.stores.sqlite_shared.shards import Shards
from scopemem.stores.sqlite_shared.usage import PendingUses
from scopemem.stores.sqlite_shared.writes import ScopeLimit, transaction

__all__ = ["Porting", "export_page", "import_scope", "scope_keys"]

def scope_keys(conn: Any) -> list[str]:
    return [key for (key,) in conn.execute(SQL.export_scopes)]


def export_page(conn: Any, uses: PendingUses, shard: int, scope_key: str, after: int,
                limit: int) -> list[Record]:
    _lead, rows = uses.rows(conn, shard, scope_key, SQL.export_page,
                            {"scope": scope_key, "after": after, "limit": limit})
    return [sqlite_sql.record(row) for row in rows]


def import_scope(conn: Any, uses: PendingUses, shard: int, analyzer: Analyzer,
                 scope_key: str, batch: list[tuple[int, Record]], now: int) -> int:
    """Import one scope's checked records (``group_import``); how many were added."""
    with transaction(conn, uses, shard, scope_key):
        conn.execute(st.NEW_SCOPE, {"scope": scope_key, "now": now})
        last_seq, _active, _generation, sid, _last_write = conn.execute(
            st.LOCK_SCOPE, {"scope": scope_key}).fetchall()[0]
        seqs = json.dumps([seq for seq, _record in batch])
        held = {seq for (seq,) in conn.execute(SQL.held_seqs, {"scope": scope_key, "seqs": seqs})}
        added = [item for item in batch if item[0] not in held]  # in seq order
        if not added:
            return 0
        tokens = {seq: index_tokens(r.text, r.keywords, analyzer) if r.is_active else []
                  for seq, r in added}
        conn.execute(st.INSERT_ROWS, {"scope": scope_key, "rows": json.dumps([
            sqlite_sql.insert_row(seq, r, now, tokens[seq]) for seq, r in added],
            ensure_ascii=False)})
        around = json.dumps(sorted({n for seq, _r in added for n in (seq - 1, seq + 1)}))
        beside = {seq: row for seq, *row in conn.execute(
            SQL.neighbours, {"scope": scope_key, "seqs": around})}
        continues, follows = import_threads(added, beside)
        index.unpost(conn, sid, follows)  # indexed again, with the marker
        index.post(conn, sid, [*((seq, tokens[seq], c) for seq, c in continues.items()),
                               *((seq, beside[seq][2].split(), True) for seq in follows)])
        conn.execute(SQL.import_counts, {
            "scope": scope_key, "last": max(last_seq, added[-1][0]),
            "added": len(continues)})
    return len(added)


class Porting:
    """Export and import of ``SharedSqliteStore``."""

    def __init__(self, shards: Shards, pools: ShardPools, uses: PendingUses,
                 scopes: ScopeLimit, clock: Clock, analyzer: Analyzer) -> None:
        self._shards = shards
        self._pools = pools
        self._uses = uses
        self._scopes = scopes
        self._clock = clock
        self._analyzer = analyzer

    async def export_scopes(self) -> list[str]:
        keys: list[str] = []
        for shard in range(self._shards.count):
            keys.extend(await self._pools.read(shard, scope_keys) or [])
        return sorted(keys)

    async def export_page(self, scope_key: str, after: int, limit: int) -> list[Record]:
        check_scope_key(scope_key)
        if limit <= 0:
            return []
        shard = self._shards.of(scope_key)
        found: list[Record] = await self._pools.read(shard, export_page, self._uses, shard,
                                                     scope_key, after, limit) or []
        return found

    async def import_records(self, records: Sequence[Record]) -> int:
        now = self._clock()
        groups = group_import(records, now)
        for batch in groups.values():
            # A shard's token index keys a record by its seq in 32 bits (``index.rowid``):
            # a higher one would leave the scope no id to give its next write.
            if batch and batch[-1][0] > index.MAX_SEQ:
                raise StoreRefused(f"import: {batch[-1][1].id!r}: the sqlite store numbers a"
                                   f" scope's records up to {index.MAX_SEQ}")
        added = 0
        for scope_key, batch in groups.items():
            shard = self._shards.of(scope_key)
            added += await self._pools.write(shard, self._import, shard, scope_key, batch, now,
                                             create=True) or 0
        return added

    def _import(self, conn: Any, shard: int, scope_key: str,
                batch: list[tuple[int, Record]], now: int) -> int:
        if conn.execute(st.LOCK_SCOPE, {"scope": scope_key}).fetchall() == []:
            self._scopes.reserve()
        return import_scope(conn, self._uses, shard, self._analyzer, scope_key, batch, now)
