"""The worker client's counters (``/counts``, ``/stats``), vectors (``/vectors-missing``,
``/put-vectors``, ``/nearest``) and moving records (``/scopes``, ``/export``, ``/import``).

Arguments are checked first by the rules every store runs, so nothing is sent that the worker
would refuse and no secret leaves the process (``group_import``); bodies are split within the
wire's caps. Answers are checked as strictly as a person's counters or export deserve: a row
or record of another scope, a page out of order, anything not well formed is a
``StoreError``, never a silent gap. A worker whose store cannot answers 501
(``StoreUnsupported``). Vectors travel as base64 of float32 bytes, so the worker ranks
exactly what the in-process search would.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Collection, Sequence
from typing import Any

from scopemem.core.counters import DAY_MS, counter_name_problem
from scopemem.core.porting import record_from_wire
from scopemem.core.records import (
    MAX_COUNT_ROWS,
    MAX_EXPORT_PAGE,
    MAX_IMPORT_BATCH,
    MAX_IMPORT_BYTES,
    MAX_LIMIT,
    MAX_SCOPES_PAGE,
    MAX_STATS_SCOPES,
    CountRow,
    Record,
    WireError,
    from_wire,
    to_wire,
)
from scopemem.core.scopes import scope_key_problem
from scopemem.errors import StoreError
from scopemem.stores.base import check_scope_key, wall_clock_ms
from scopemem.stores.porting import group_import
from scopemem.stores.shared import counts as counting
from scopemem.stores.shared.batches import seq_in_scope
from scopemem.stores.shared.vectors import (
    MAX_MISSING_PAGE,
    MAX_PUT_VECTORS,
    check,
    check_model,
    keyed,
)
from scopemem.stores.worker_transport import Command, in_scope, listed, parsed, whole_number

__all__ = ["PUT_BYTES", "WorkerCalls"]

#: The base64 one ``/put-vectors`` call carries at most (but for a single vector): well
#: under a worker's default body limit.
PUT_BYTES = 192 * 1024


def _b64(vector: bytes) -> str:
    return base64.b64encode(vector).decode("ascii")


def _parts(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[start:start + size] for start in range(0, len(items), size)]


class WorkerCalls:
    """The calls, sent through the transport's ``command``."""

    def __init__(self, command: Command) -> None:
        self._command = command

    # --- counters (``stores.base.CountingStore``) -------------------------------------------

    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        for part in _parts(counting.check_rows(rows), MAX_COUNT_ROWS):
            await self._command("/counts", {"counts": to_wire(part)})

    async def read_counts(self, scope_keys: Sequence[str] | None = None, *,
                          prefix: str | None = None, since_day: int = 0) -> list[CountRow]:
        if counting.no_scope_starts(prefix):
            return []
        base: dict[str, Any] = {"since": max(since_day, 0) * DAY_MS}
        if prefix is not None:
            base["prefix"] = prefix
        keys = None if scope_keys is None else sorted({check_scope_key(k) for k in scope_keys})
        payloads = [base] if keys is None else [
            {**base, "scopeKeys": part} for part in _parts(keys, MAX_STATS_SCOPES)]

        def asked(item: Any) -> CountRow:
            # Never a name or key this client would refuse to send, nor a scope not asked for.
            row = from_wire(item, CountRow)
            if (scope_key_problem(row.scope_key) or counter_name_problem(row.name)
                    or row.value < 0 or not counting.select_scope(row.scope_key, keys, prefix)):
                raise WireError("a row it was not asked for or that is not valid")
            return row

        rows: list[CountRow] = []
        for payload in payloads:
            data = await self._command("/stats", payload)
            rows += parsed("/stats", "a row", asked, listed(data, "/stats", "rows"))
            if data.get("truncated") is True:
                raise StoreError("memory worker /stats: more rows than one answer carries;"
                                 " ask for fewer scopes or a later --since")
        return sorted(rows, key=lambda row: (row.scope_key, row.day, row.name))

    # --- vectors (``stores.shared.vectors.VectorStore``) ------------------------------------

    async def vectors_missing(self, scope_key: str, model: str, limit: int
                              ) -> list[tuple[str, str]]:
        check_scope_key(scope_key)
        check_model(model)
        if limit <= 0:
            return []
        route = "/vectors-missing"
        data = await self._command(route, {"scopeKey": scope_key, "model": model,
                                           "limit": min(limit, MAX_MISSING_PAGE)})

        def item(found: Any) -> tuple[str, str]:
            record_id, text = (found.get("id"), found.get("text")) if isinstance(
                found, dict) else (None, None)
            if seq_in_scope(scope_key, record_id) is None or not isinstance(text, str):
                raise WireError(f"not an id of {scope_key!r} and a text")
            return str(record_id), text

        return parsed(route, "an item", item, listed(data, route, "missing"))

    async def put_vectors(self, scope_key: str, model: str,
                          vectors: Sequence[tuple[str, bytes]]) -> int:
        items = [{"id": f"mem:{scope_key}:{seq}", "vector": _b64(vector)}
                 for seq, vector in keyed(scope_key, model, vectors).items()]
        size = len(items[0]["vector"]) if items else 1
        kept = 0
        for part in _parts(items, max(1, min(MAX_PUT_VECTORS, PUT_BYTES // max(size, 1)))):
            data = await self._command("/put-vectors", {"scopeKey": scope_key, "model": model,
                                                        "vectors": part})
            kept += whole_number(data, "/put-vectors", "kept")
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
            "scopeKey": scope_key, "model": model, "vector": _b64(query), "limit": limit,
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

    # --- moving records (``stores.porting.PortableStore``) ----------------------------------

    async def export_scopes(self) -> list[str]:
        keys: list[str] = []
        while True:
            payload: dict[str, Any] = {"limit": MAX_SCOPES_PAGE}
            if keys:
                payload["after"] = keys[-1]
            data = await self._command("/scopes", payload)
            page, more = data.get("scopes"), data.get("more")
            if (not isinstance(page, list) or not isinstance(more, bool)
                    or not all(isinstance(key, str) for key in page)
                    or (keys and page and page[0] <= keys[-1]) or (more and not page)):
                raise StoreError("memory worker /scopes answered without a sorted 'scopes'"
                                 " list and a boolean 'more'")
            keys.extend(page)
            if not more:
                return keys

    async def export_page(self, scope_key: str, after: int, limit: int) -> list[Record]:
        check_scope_key(scope_key)
        data = await self._command("/export", {"scopeKey": scope_key, "after": after,
                                               "limit": min(limit, MAX_EXPORT_PAGE)})
        return parsed("/export", "a record", in_scope(scope_key, record_from_wire),
                      listed(data, "/export", "records"))

    async def import_records(self, records: Sequence[Record]) -> int:
        """Sent in bodies of at most ``MAX_IMPORT_BATCH`` records and about
        ``MAX_IMPORT_BYTES``, each one transaction per scope there; the worker keeps no
        record's ``source`` (``WorkerStore.keeps_import_source``)."""
        groups = group_import(records, wall_clock_ms())
        imported = size = 0
        batch: list[dict[str, Any]] = []
        try:
            for _seq, record in (item for group in groups.values() for item in group):
                item = to_wire(record)
                length = len(json.dumps(item, ensure_ascii=False).encode("utf-8"))
                if batch and (len(batch) >= MAX_IMPORT_BATCH
                              or size + length > MAX_IMPORT_BYTES):
                    imported += await self._import(batch)
                    batch, size = [], 0
                batch.append(item)
                size += length
            return imported + (await self._import(batch) if batch else 0)
        except StoreError as exc:  # the pages before it stay written: say how many
            exc.imported = imported
            raise

    async def _import(self, batch: list[dict[str, Any]]) -> int:
        count = whole_number(await self._command("/import", {"records": batch}), "/import",
                             "imported")
        if count > len(batch):
            raise StoreError("memory worker /import answered more 'imported' than it was sent")
        return count
