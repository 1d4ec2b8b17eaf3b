"""The served OpenAPI document is exactly as strict as the worker: schemathesis generates
requests from it and sends them to a live server on 127.0.0.1 over the default store (the
shared SQLite layout, in a temporary directory). A request the document calls
valid is answered 200 (never refused), any request is answered without a 5xx, and every
answer fits the document (schemathesis' own checks).

Bounded and derandomized: a few dozen examples per route and mode, the same ones every run.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from scopemem.core.records import MAX_USED_IDS
from scopemem.stores.sqlite_shared.store import SharedSqliteStore
from scopemem.worker_aiohttp.app import create_app, load_openapi, running
from tests.worker.conftest import AUTH, TOKEN

SCHEMA = schemathesis.openapi.from_dict(json.loads(load_openapi()))
OPERATIONS = [(operation.path, operation.method.upper())
              for operation in (result.ok() for result in SCHEMA.get_all_operations())]
#: A vector of two dimensions, as the worker carries it.
UNIT = base64.b64encode(struct.pack("<2f", 0.6, 0.8)).decode()
BOUNDED = settings(max_examples=15, derandomize=True, database=None, deadline=None,
                   phases=[Phase.explicit, Phase.generate],
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                          HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live worker on 127.0.0.1, in a thread of its own (schemathesis calls are blocking)."""
    started = threading.Event()
    url: list[str] = []
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def serve() -> None:
        store = SharedSqliteStore(tmp_path_factory.mktemp("worker"), synchronous="off")
        async with running(create_app(store, TOKEN)) as base:
            url.append(base)
            started.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert started.wait(30)
    yield url[0]
    loop.call_soon_threadsafe(stop.set)
    thread.join(30)
    loop.close()


def within_the_words(path: str, body: Any) -> None:
    """Apply the rules the document states in words, JSON Schema having no way to: an
    imported record's id is ``mem:<its scopeKey>:<n>`` and its times are no later than the
    worker's clock (plus a skew), a reach's record id is ``mem:<its scopeKey>:<n>``,
    ``/used`` holds at most ``MAX_USED_IDS`` ids in all, and a vector is whole float32
    values, finite and not zero, of the dimensions of the scope's others (here: every
    vector is made one of two dimensions)."""
    if path == "/import":
        now = int(time.time() * 1000)
        for n, record in enumerate(body["records"], 1):
            record["id"] = f"mem:{record['scopeKey']}:{n}"
            for field in ("createdAt", "lastUsedAt"):
                if field in record:
                    record[field] = min(record[field], now)
    elif path == "/log-reaches":
        for n, reach in enumerate(body["reaches"], 1):
            reach["recordId"] = f"mem:{reach['scopeKey']}:{n}"
    elif path == "/put-vectors":
        for item in body["vectors"]:
            item["vector"] = UNIT
    elif path == "/nearest":
        body["vector"] = UNIT
    elif path == "/used":
        room = MAX_USED_IDS
        for item in body["used"]:
            item["ids"] = item["ids"][:room]
            room -= len(item["ids"])


@pytest.mark.parametrize(("path", "method"), OPERATIONS)
def test_a_request_the_document_calls_valid_is_accepted(worker, path, method):
    operation = SCHEMA[path][method]

    @BOUNDED
    @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
    def accepted(case: schemathesis.Case) -> None:
        if method == "POST":
            within_the_words(path, case.body)
        if case.headers and "Idempotency-Key" in case.headers:
            # A key names one request: another body under a key answered is refused.
            case.headers["Idempotency-Key"] = uuid.uuid4().hex
        response = case.call_and_validate(base_url=worker, headers=AUTH)
        assert response.status_code == 200, (response.status_code, response.text)

    accepted()


@pytest.mark.parametrize("path", [path for path, method in OPERATIONS if method == "POST"])
def test_a_request_the_document_calls_invalid_never_gets_a_5xx(worker, path):
    operation = SCHEMA[path]["POST"]

    @BOUNDED
    @given(case=operation.as_strategy(generation_mode=GenerationMode.NEGATIVE))
    def refused(case: schemathesis.Case) -> None:
        response = case.call(base_url=worker, headers=AUTH)
        assert response.status_code < 500, (response.status_code, response.text)

    refused()
