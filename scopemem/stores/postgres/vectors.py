"""The semantic lane's vectors on the PostgreSQL store (``stores.shared.vectors.VectorStore``;
the search and its copies: ``shared.nearest``).

``vectors`` (migration 6) holds at most one vector per record, keyed as its record is, as
``bytea``. A vector is kept only for a record active when it is put, and the schema's
triggers drop it in the statement that retires or deletes its record. pgvector is not
used: brute force over a scope's vectors (10,000 at most, the scope cap) needs no
extension on the server, and every store answers alike.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from scopemem.core.records import Record
from scopemem.stores.base import check_scope_key
from scopemem.stores.postgres.pool import Connect
from scopemem.stores.postgres.statements import Statements, record_of
from scopemem.stores.postgres.usage import DeferredUsage
from scopemem.stores.shared import vectors as shared
from scopemem.stores.shared.batches import seqs_in_scope
from scopemem.stores.shared.bumps import bumped
from scopemem.stores.shared.nearest import Matrices, answered, nearest

__all__ = ["Vectors"]


class Vectors:
    """The store's ``VectorStore`` methods over its pooled connections."""

    def __init__(self, sql: Statements, connection: Connect, usage: DeferredUsage) -> None:
        self.sql = sql
        self._connection = connection
        self._usage = usage
        self._matrices = Matrices()
        # Kept only for a record active now, its row locked against a retirement meanwhile.
        self._put = (
            f"INSERT INTO {sql.dialect.table('vectors')} (scope_key, seq, model, vector)"
            " SELECT r.scope_key, r.seq, %(model)s, v.vector FROM unnest(%(seqs)s::bigint[],"
            " %(vectors)s::bytea[]) AS v(seq, vector) JOIN"
            f" (SELECT scope_key, seq FROM {sql.dialect.table('records')}"
            " WHERE scope_key = %(scope)s AND status = 'active' AND seq = ANY(%(seqs)s)"
            " FOR SHARE) r ON r.seq = v.seq"
            " ON CONFLICT (scope_key, seq) DO UPDATE SET model = excluded.model,"
            " vector = excluded.vector")

    async def vectors_missing(self, scope_key: str, model: str, limit: int
                              ) -> list[tuple[str, str]]:
        params = shared.missing_params(scope_key, model, limit)
        if params is None:
            return []
        async with self._connection() as conn:
            cursor = await conn.execute(self.sql.vectors_missing, params)
            return [(record_id, text) for record_id, text in await cursor.fetchall()]

    async def put_vectors(self, scope_key: str, model: str,
                          vectors: Sequence[tuple[str, bytes]]) -> int:
        kept = shared.keyed(scope_key, model, vectors)
        if not kept:
            return 0
        params = {"scope": scope_key, "model": model, "seqs": list(kept),
                  "vectors": list(kept.values())}
        dimensions = len(next(iter(kept.values()))) // 4
        async with self._connection() as conn, conn.transaction():
            cursor = await conn.execute(self.sql.dimensions, params)
            held = await cursor.fetchone()
            shared.check_dimensions(dimensions, None if held is None else held[0])
            cursor = await conn.execute(self._put, params)
            if cursor.rowcount > 0:
                await conn.execute(self.sql.next_generation, params)
            return int(cursor.rowcount)

    async def nearest(self, scope_key: str, model: str, vector: bytes, limit: int,
                      floor: float, include: Collection[str] = ()
                      ) -> list[tuple[Record, float]]:
        check_scope_key(scope_key)
        query = shared.check(vector)
        params: dict[str, Any] = {"scope": scope_key, "model": shared.check_model(model)}
        async with (self._usage.reading(scope_key), self._connection() as conn,
                    conn.transaction()):
            # One snapshot for the counter, the vectors and the records they choose.
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            cursor = await conn.execute(self.sql.generation, params)
            state = await cursor.fetchone()
            if state is None:
                return []
            matrix = self._matrices.get(scope_key, model, state[0])
            if matrix is None:
                async with conn.cursor(binary=True) as binary:
                    await binary.execute(self.sql.of_model, params)
                    rows = await binary.fetchall()
                matrix = self._matrices.keep(scope_key, model, state[0], rows)
            chosen = nearest(*matrix, query, limit, floor, seqs_in_scope(scope_key, include))
            if not chosen:
                return []
            params["seqs"] = [seq for seq, _cosine in chosen]
            cursor = await conn.execute(self.sql.active_rows, params)
            pending = self._usage.pending(scope_key)
            records = [record_of(bumped(row, pending))
                       for row in await cursor.fetchall()]
        return answered(scope_key, chosen, records)
