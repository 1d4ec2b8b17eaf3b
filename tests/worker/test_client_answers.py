"""WorkerStore facing a server that answers nonsense: every call that reads an answer
raises a ``StoreError`` naming its route, and a well-formed answer is still read."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from scopemem.core.records import CountRow, Record, Status
from scopemem.errors import StoreError
from scopemem.stores.worker import WorkerStore
from tests.conftest import START_MS
from tests.worker.test_client import ORG, QUICK, TOKEN, Stub, base_url, stub, wire_record

__all__ = ["base_url", "stub"]  # the fixtures this module reuses

OTHER = "user:slack:U9"
VECTOR = b"\x00\x00\x80?" * 3  # (1.0, 1.0, 1.0) as float32
ROW = {"scopeKey": ORG, "day": 20000, "name": "inserted", "value": 1}
Call = Callable[[WorkerStore], Awaitable[Any]]

#: route → the call, a well-formed answer, and answers a hostile server could send.
CASES: dict[str, tuple[Call, dict[str, Any], list[Any]]] = {
    "/delete-scope": (lambda s: s.delete_scope(ORG), {"deleted": 2},
                      [{}, {"deleted": -1}, {"deleted": "2"}, {"deleted": True}]),
    "/scrub-provenance": (lambda s: s.scrub_provenance(ORG, "user:slack:U1"),
                          {"scrubbed": 0}, [{}, {"scrubbed": 1.5}]),
    "/purge": (lambda s: s.purge(), {"purged": 1, "scrubbed": 0},
               [{"purged": 1}, {"purged": 1, "scrubbed": None}]),
    "/sweep": (lambda s: s.sweep(ORG), {"swept": 0}, [{"swept": "x"}, {"ids": 3}, {"swept": -1}]),
    "/forget": (lambda s: s.forget(ORG, f"mem:{ORG}:1"), {"forgotten": False},
                [{"forgotten": 1}, {"forgotten": None}]),
    "/write": (lambda s: s.write(ORG, [_fact()]), {"inserted": 1},
               [{"inserted": "1"}, {"inserted": None}, {"inserted": -1},
                {"inserted": 1, "evicted": -2}]),
    "/stats": (lambda s: s.read_counts([ORG]), {"rows": [ROW]},
               [{}, {"rows": "x"}, {"rows": [{**ROW, "scopeKey": OTHER}]},
                {"rows": [{**ROW, "name": "bogus"}]}, {"rows": [{**ROW, "value": -1}]},
                {"rows": [ROW], "truncated": True}]),
    "/vectors-missing": (lambda s: s.vectors_missing(ORG, "m", 5),
                         {"missing": [{"id": f"mem:{ORG}:1", "text": "t"}]},
                         [{}, {"missing": [{"id": f"mem:{OTHER}:1", "text": "t"}]},
                          {"missing": [{"id": f"mem:{ORG}:1"}]}, {"missing": ["x"]}]),
    "/put-vectors": (lambda s: s.put_vectors(ORG, "m", [(f"mem:{ORG}:1", VECTOR)]),
                     {"kept": 1}, [{}, {"kept": -1}, {"kept": "1"}]),
    "/nearest": (lambda s: s.nearest(ORG, "m", VECTOR, 5, 0.0),
                 {"records": [wire_record(1)], "cosines": [0.5]},
                 [{}, {"records": [wire_record(1)]},
                  {"records": [wire_record(1)], "cosines": [0.5, 0.5]},
                  {"records": [wire_record(1)], "cosines": [2.0]},
                  {"records": [wire_record(1)], "cosines": [True]},
                  {"records": [wire_record(1, scope=OTHER)], "cosines": [0.5]}]),
    "/scopes": (lambda s: s.export_scopes(), {"scopes": [ORG], "more": False},
                [{}, {"scopes": [ORG]}, {"scopes": [1], "more": False},
                 {"scopes": [], "more": True}, {"scopes": "x", "more": False}]),
    "/export": (lambda s: s.export_page(ORG, 0, 10), {"records": [wire_record(1)]},
                [{}, {"records": "x"}, {"records": [wire_record(1, useCount="x")]}]),
    "/import": (lambda s: s.import_records([_record()]), {"imported": 1},
                [{}, {"imported": 2}, {"imported": -1}, {"imported": True}]),
}


def _fact() -> Any:
    from tests.conftest import fact

    return fact("use the vpn")


def _record() -> Record:
    return Record(id=f"mem:{ORG}:1", scope_key=ORG, kind="fact", text="use the vpn",
                  keywords=(), source_thread_key="slack:C1/1", created_at=START_MS,
                  status=Status.ACTIVE)


@pytest.fixture
async def store(base_url: str):
    worker = WorkerStore(base_url, TOKEN, retry=QUICK)
    yield worker
    await worker.close()


@pytest.mark.parametrize("route", list(CASES))
async def test_every_malformed_answer_is_a_store_error_naming_the_route(store, stub: Stub,
                                                                        route: str):
    call, good, hostile = CASES[route]
    stub.replies[route] = (200, good)
    await call(store)  # a well-formed answer is read
    for answer in hostile:
        stub.replies[route] = (200, answer)
        with pytest.raises(StoreError, match=route):
            await call(store)


async def test_rows_answered_are_read_back(store, stub: Stub):
    stub.replies["/stats"] = (200, {"rows": [ROW]})
    assert await store.read_counts([ORG]) == [CountRow(ORG, 20000, "inserted", 1)]
