"""The semantic lane's vectors on the shared-file SQLite store
(``stores.shared.vectors.VectorStore``; the search and its copies: ``shared.nearest``).

A shard's ``vectors`` table (``schema.py``) holds at most one vector per record, keyed as
its record is. A vector is kept only for a record active when it is put, and the shard's
triggers drop it in the very statement that retires or deletes its record, so no writer
has to remember to.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

from scopemem.core.records import Record
from scopemem.stores.base import check_scope_key
from scopemem.stores.shared import vectors as shared
from scopemem.stores.shared.batches import seqs_in_scope
from scopemem.stores.shared.nearest import Matrices, answered, nearest
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared.dialect import SQL
from scopemem.stores.sqlite_shared.pools import ShardPools
from scopemem.stores.sqlite_shared.usage import PendingUses

__all__ = ["Vectors"]

# Kept only for a record active now: an id of a retired or unknown record keeps nothing.
_PUT = ("INSERT INTO vectors (scope_key, seq, model, vector) SELECT :scope, :seq, :model,"
        " :vector WHERE EXISTS (SELECT 1 FROM records WHERE scope_key = :scope"
        " AND seq = :seq AND status = 'active')"
        " ON CONFLICT (scope_key, seq) DO UPDATE SET model = excluded.model,"
        " vector = excluded.vector")


class Vectors:
    """The store's ``VectorStore`` methods, over its shards' pools and pending uses."""

    def __init__(self, of: Any, pools: ShardPools, uses: PendingUses) -> None:
        self._of = of  # scope key → its shard
        self._pools = pools
        self._uses = uses
        self._matrices = Matrices()

    async def vectors_missing(self, scope_key: str, model: str, limit: int
                              ) -> list[tuple[str, str]]:
        params = shared.missing_params(scope_key, model, limit)
        if params is None:
            return []
        rows = await self._pools.read(self._of(scope_key), sqlite_sql.fetch,
                                      SQL.vectors_missing, params)
        return [(record_id, text) for record_id, text in rows or ()]

    async def put_vectors(self, scope_key: str, model: str,
                          vectors: Sequence[tuple[str, bytes]]) -> int:
        rows = [{"scope": scope_key, "seq": seq, "model": model, "vector": vector}
                for seq, vector in shared.keyed(scope_key, model, vectors).items()]
        if not rows:
            return 0
        kept = await self._pools.write(self._of(scope_key), _put, rows, create=True)
        return kept or 0

    async def nearest(self, scope_key: str, model: str, vector: bytes, limit: int,
                      floor: float, include: Collection[str] = ()
                      ) -> list[tuple[Record, float]]:
        check_scope_key(scope_key)
        query = shared.check(vector)
        params = {"scope": scope_key, "model": shared.check_model(model)}
        shard = self._of(scope_key)
        found = await self._pools.read(shard, _nearest, self._uses, self._matrices, shard,
                                       params, query, limit, floor, include)
        return found or []


def _put(conn: Any, rows: list[dict[str, Any]]) -> int:
    """Keep the rows' vectors in one transaction, refused as a whole when their dimensions
    differ from the scope's vectors of the model; how many were kept."""
    kept = 0
    with sqlite_sql.immediate(conn):
        held = conn.execute(SQL.dimensions, rows[0]).fetchall()
        shared.check_dimensions(len(rows[0]["vector"]) // 4, held[0][0] if held else None)
        for row in rows:
            conn.execute(_PUT, row)
            kept += conn.changes()
        if kept:
            conn.execute(SQL.next_generation, rows[0])
    return kept


def _nearest(conn: Any, uses: PendingUses, matrices: Matrices, shard: int,
             params: dict[str, Any], query: shared.Vector, limit: int, floor: float,
             include: Collection[str]) -> list[tuple[Record, float]]:
    scope_key, model = params["scope"], params["model"]
    with sqlite_sql.snapshot(conn):
        state = conn.execute(SQL.generation, params).fetchall()
        if not state:
            return []
        matrix = matrices.get(scope_key, model, state[0][0]) or matrices.keep(
            scope_key, model, state[0][0], conn.execute(SQL.of_model, params).fetchall())
        chosen = nearest(*matrix, query, limit, floor, seqs_in_scope(scope_key, include))
        if not chosen:
            return []
        _lead, rows = uses.rows(conn, shard, scope_key, SQL.active_rows,
                                {"scope": scope_key,
                                 "seqs": json.dumps([seq for seq, _cosine in chosen])})
    return answered(scope_key, chosen, [sqlite_sql.record(row) for row in rows])
