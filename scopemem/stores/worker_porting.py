"""Moving records through the Memory Worker (``stores.porting.PortableStore`` for
``WorkerStore``): ``/scopes`` and ``/export`` a page at a time, ``/import`` in bounded bodies.

Each function is given the transport's ``command`` and nothing else. Answers are checked as
strictly as a person's export deserves: a page out of order, a record that is not valid or of
another scope is a ``StoreError``, never a silent gap in what was exported.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from scopemem.core.porting import record_from_wire
from scopemem.core.records import (
    MAX_EXPORT_PAGE,
    MAX_IMPORT_BATCH,
    MAX_IMPORT_BYTES,
    MAX_SCOPES_PAGE,
    Record,
    to_wire,
)
from scopemem.errors import StoreError
from scopemem.stores.base import check_scope_key, wall_clock_ms
from scopemem.stores.porting import group_import
from scopemem.stores.worker_transport import Command, in_scope, listed, parsed

__all__ = ["export_page", "export_scopes", "import_records"]


async def export_scopes(command: Command) -> list[str]:
    """Every scope key the worker's store holds, through /scopes a page at a time."""
    keys: list[str] = []
    while True:
        payload: dict[str, Any] = {"limit": MAX_SCOPES_PAGE}
        if keys:
            payload["after"] = keys[-1]
        data = await command("/scopes", payload)
        page, more = data.get("scopes"), data.get("more")
        if (not isinstance(page, list) or not isinstance(more, bool)
                or not all(isinstance(key, str) for key in page)
                or (keys and page and page[0] <= keys[-1]) or (more and not page)):
            raise StoreError("memory worker /scopes answered without a sorted 'scopes'"
                             " list and a boolean 'more'")
        keys.extend(page)
        if not more:
            return keys


async def export_page(command: Command, scope_key: str, after: int, limit: int
                      ) -> list[Record]:
    check_scope_key(scope_key)
    data = await command("/export", {"scopeKey": scope_key, "after": after,
                                     "limit": min(limit, MAX_EXPORT_PAGE)})
    return parsed("/export", "a record", in_scope(scope_key, record_from_wire),
                  listed(data, "/export", "records"))


async def import_records(command: Command, records: Sequence[Record]) -> int:
    """The records checked and screened here first (``group_import``: nothing is sent
    when one is refused, and no secret leaves the process), then sent to /import in
    bodies of at most ``MAX_IMPORT_BATCH`` records and about ``MAX_IMPORT_BYTES``; each
    body is one transaction per scope there. The worker imports every record as
    reflection-sourced (``WorkerStore.keeps_import_source``)."""
    groups = group_import(records, wall_clock_ms())
    imported = 0
    batch: list[dict[str, Any]] = []
    size = 0
    for _seq, record in (item for group in groups.values() for item in group):
        item = to_wire(record)
        length = len(json.dumps(item, ensure_ascii=False).encode("utf-8"))
        if batch and (len(batch) >= MAX_IMPORT_BATCH or size + length > MAX_IMPORT_BYTES):
            imported += await _import_batch(command, batch)
            batch, size = [], 0
        batch.append(item)
        size += length
    if batch:
        imported += await _import_batch(command, batch)
    return imported


async def _import_batch(command: Command, batch: list[dict[str, Any]]) -> int:
    data = await command("/import", {"records": batch})
    count = data.get("imported")
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= len(batch):
        raise StoreError("memory worker /import answered without a valid 'imported'")
    return count
