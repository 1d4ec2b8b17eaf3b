"""The worker client's vectors (``stores.shared.vectors.VectorStore``): ``/vectors-missing``,
``/put-vectors`` and ``/nearest`` (``worker_aiohttp/vectors.py``).

Vectors are checked here first by the rule every store runs (``shared.vectors.check``), so
nothing is sent that the worker would refuse, and travel as base64 of float32 bytes, so
each value arrives exactly as it left: the worker's search ranks what the in-process
search would. A put is sent in parts of at most ``MAX_PUT_VECTORS`` vectors and about
``PUT_BYTES`` of base64, well under a worker's default body limit. Answers are checked: a
record of another scope, a cosine that is not a number in [-1, 1], or anything not well
formed is a ``StoreError``. A worker whose store keeps no vectors answers 501, raised as
``StoreUnsupported``.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Collection, Sequence

from scopemem.core.records import MAX_LIMIT, Record
from scopemem.errors import StoreError
from scopemem.stores.base import check_scope_key
from scopemem.stores.shared.batches import seq_in_scope
from scopemem.stores.shared.vectors import (
    MAX_MISSING_PAGE,
    MAX_PUT_VECTORS,
    check,
    check_model,
    keyed,
)
from scopemem.stores.worker_transport import Command, in_scope, listed, parsed

__all__ = ["PUT_BYTES", "WorkerVectors"]

#: The base64 one ``/put-vectors`` call carries at most (but for a single vector).
PUT_BYTES = 192 * 1024


def _wire(vector: bytes) -> str:
    return base64.b64encode(vector).decode("ascii")


class WorkerVectors:
    """``vectors_missing``, ``put_vectors`` and ``nearest``, sent through the transport's
    ``command``."""

    def __init__(self, command: Command) -> None:
        self._command = command

    async def vectors_missing(self, scope_key: str, model: str, limit: int
                              ) -> list[tuple[str, str]]:
        check_scope_key(scope_key)
        check_model(model)
        if limit <= 0:
            return []
        data = await self._command("/vectors-missing", {
            "scopeKey": scope_key, "model": model, "limit": min(limit, MAX_MISSING_PAGE)})
        missing = []
        for n, item in enumerate(listed(data, "/vectors-missing", "missing")):
            record_id = item.get("id") if isinstance(item, dict) else None
            text = item.get("text") if isinstance(item, dict) else None
            if seq_in_scope(scope_key, record_id) is None or not isinstance(text, str):
                raise StoreError(f"memory worker /vectors-missing answered an item that is"
                                 f" not valid or not of {scope_key!r} (missing[{n}])")
            missing.append((str(record_id), text))
        return missing

    async def put_vectors(self, scope_key: str, model: str,
                          vectors: Sequence[tuple[str, bytes]]) -> int:
        items = [{"id": f"mem:{scope_key}:{seq}", "vector": _wire(vector)}
                 for seq, vector in keyed(scope_key, model, vectors).items()]
        per_call = max(1, min(MAX_PUT_VECTORS,
                              PUT_BYTES // max(len(items[0]["vector"]) if items else 1, 1)))
        kept = 0
        for start in range(0, len(items), per_call):
            data = await self._command("/put-vectors", {
                "scopeKey": scope_key, "model": model,
                "vectors": items[start:start + per_call]})
            count = data.get("kept")
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise StoreError("memory worker /put-vectors answered without a 'kept' count")
            kept += count
        return kept

    async def nearest(self, scope_key: str, model: str, vector: bytes, limit: int,
                      floor: float, include: Collection[str] = ()
                      ) -> list[tuple[Record, float]]:
        check_scope_key(scope_key)
        check_model(model)
        query = check(vector).astype("<f4").tobytes()
        wanted = [record_id for record_id in include
                  if seq_in_scope(scope_key, record_id) is not None][:MAX_LIMIT]
        # A floor above any cosine lets nothing in but ``include``; below -1, everything.
        limit = min(max(limit, 0), MAX_LIMIT) if floor <= 1.0 else 0
        data = await self._command("/nearest", {
            "scopeKey": scope_key, "model": model, "vector": _wire(query), "limit": limit,
            "floor": max(float(floor), -1.0) if limit else 0.0, "include": wanted})
        records = parsed("/nearest", "a record", in_scope(scope_key),
                         listed(data, "/nearest", "records"))
        cosines = listed(data, "/nearest", "cosines")
        if len(cosines) != len(records) or not all(
                not isinstance(value, bool) and isinstance(value, int | float)
                and math.isfinite(value) and -1.0 <= value <= 1.0 for value in cosines):
            raise StoreError("memory worker /nearest answered cosines that are not one"
                             " number in [-1, 1] per record")
        return list(zip(records, map(float, cosines), strict=True))

