"""The worker's /scopes, /export and /import: what they answer, and what they refuse (a 4xx
with a JSON reason naming the field; nothing written from a refused body)."""

from __future__ import annotations

import io
import json
from typing import Any

import click
import pytest

from scopemem.cli.port_stream import import_stream
from scopemem.core.porting import MAX_USE_COUNT
from scopemem.core.records import (
    MAX_EXPORT_PAGE,
    MAX_IMPORT_BATCH,
    MAX_SCOPES_PAGE,
    Record,
    Source,
    Status,
)
from scopemem.errors import StoreError, StoreRefused
from scopemem.secrets import redact
from scopemem.stores.null import NullStore
from scopemem.stores.porting import export_records
from scopemem.stores.worker import WorkerStore
from scopemem.worker_aiohttp.app import create_app, load_openapi, running
from tests.secret_corpus import CORPUS
from tests.worker.conftest import AUTH, ORG, TOKEN

USER = "user:slack:U2"
YEAR_2100 = 4_102_444_800_000
GATED = "PR 1835 was pushed at sha 3f9a2c1 with all tests passing"


def wire_record(seq: int, scope_key: str = ORG, **fields: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"id": f"mem:{scope_key}:{seq}", "scopeKey": scope_key,
                            "kind": "fact", "text": f"record {seq}", "keywords": [],
                            "sourceThreadKey": "slack:C1/1", "createdAt": 1_000 + seq,
                            "useCount": 0, "status": "active"}
    item.update(fields)
    return item


async def post(client, path: str, body: Any, headers=AUTH) -> tuple[int, Any]:
    response = await client.post(path, json=body, headers=headers)
    return response.status, await response.json()


async def test_import_then_export_a_page_at_a_time(client, spy):
    status, answer = await post(client, "/import", {"records": [
        wire_record(3), wire_record(1, status="superseded"), wire_record(2, USER)]})
    assert (status, answer) == (200, {"ok": True, "imported": 3, "redacted": 0, "swept": 0,
                                      "sourceReset": 0})
    status, answer = await post(client, "/import", {"records": [wire_record(3)]})
    assert answer["imported"] == 0
    status, answer = await post(client, "/scopes", {"limit": 1})
    assert answer == {"scopes": [ORG], "more": True}
    status, answer = await post(client, "/scopes", {"limit": 5, "after": ORG})
    assert answer == {"scopes": [USER], "more": False}
    status, answer = await post(client, "/export", {"scopeKey": ORG, "limit": 1})
    assert [r["id"] for r in answer["records"]] == [f"mem:{ORG}:1"]
    assert answer["records"][0]["status"] == "superseded"
    status, answer = await post(client, "/export", {"scopeKey": ORG, "after": 1, "limit": 5})
    assert [r["id"] for r in answer["records"]] == [f"mem:{ORG}:3"]


async def test_an_import_is_screened_as_a_write_is_and_vouches_for_no_source(client, spy):
    """Any token holder may call /import: secrets are redacted as /write redacts them, a
    fact the status gate refuses is kept swept, and a claimed ``human`` source is reset to
    reflection. The answer counts each. (A secret split by a NUL is not sent: the wire
    refuses a NUL in a known string with a 400.)"""
    corpus = [secret for secret in CORPUS if "\x00" not in secret.text]
    items = [wire_record(n, text=secret.text) for n, secret in enumerate(corpus, 1)]
    items += [wire_record(101, text="I deploy on fridays", source="human"),
              wire_record(102, text=GATED), wire_record(103, text="deploys need the vpn")]
    totals = {"imported": 0, "redacted": 0, "swept": 0, "sourceReset": 0}
    for start in range(0, len(items), MAX_IMPORT_BATCH):
        status, answer = await post(client, "/import",
                                    {"records": items[start:start + MAX_IMPORT_BATCH]})
        assert status == 200 and answer.pop("ok") is True, answer
        totals = {name: totals[name] + answer[name] for name in totals}
    assert totals == {"imported": len(items), "swept": 1, "sourceReset": 1,
                      "redacted": sum(redact(secret.text) != secret.text for secret in corpus)}
    exported = [record async for record in export_records(spy.inner, ORG)]
    assert [secret.kind for secret in CORPUS
            if any(secret.raw in record.text for record in exported)] == []
    by_id = {record.id: record for record in exported}
    assert by_id[f"mem:{ORG}:101"].source is Source.REFLECTION
    assert by_id[f"mem:{ORG}:102"].status is Status.SWEPT
    assert by_id[f"mem:{ORG}:103"].status is Status.ACTIVE


@pytest.mark.parametrize(("path", "body", "says"), [
    ("/import", {}, "records is required"),
    ("/import", {"records": {}}, "records must be a list"),
    ("/import", {"records": [wire_record(n) for n in range(1, MAX_IMPORT_BATCH + 2)]},
     f"records must hold at most {MAX_IMPORT_BATCH} items"),
    ("/import", {"records": [wire_record(1), wire_record(2, id=f"mem:{USER}:2")]},
     "records[1]: id 'mem:user:slack:U2:2' is not mem:org:acme:<n>"),
    ("/import", {"records": [wire_record(1, id=f"mem:{ORG}:01")]}, "no leading zero"),
    ("/import", {"records": [wire_record(1, scopeKey="has space")]}, "records[0]: scopeKey"),
    ("/import", {"records": [wire_record(1, text="x" * 4001)]},
     "records[0]: text must be at most 4000 characters"),
    ("/import", {"records": [wire_record(1, keywords=["k"] * 21)]},
     "records[0]: keywords must hold at most 20"),
    ("/import", {"records": [wire_record(1, useCount=-1)]}, "records[0]:"),
    ("/import", {"records": [wire_record(1, createdAt=2**60)]},
     "records[0]: createdAt must be an integer from 0 to"),
    ("/import", {"records": [wire_record(1), wire_record(2, createdAt=YEAR_2100)]},
     "records[1]: createdAt 4102444800000 is in the future"),
    ("/import", {"records": [wire_record(1, lastUsedAt=YEAR_2100)]},
     "records[0]: lastUsedAt 4102444800000 is in the future"),
    ("/import", {"records": [wire_record(1, useCount=10**12)]},
     "records[0]: useCount must be an integer from 0 to 1000000000"),
    ("/import", {"records": [wire_record(1, supersedes="garbage id")]},
     "records[0]: supersedes is not a memory id (mem:<scopeKey>:<n>)"),
    ("/import", {"records": [wire_record(1), wire_record(2, restates="mem:org:acme")]},
     "records[1]: restates is not a memory id (mem:<scopeKey>:<n>)"),
    ("/import", {"records": [wire_record(1, status="gone")]}, "records[0]:"),
    ("/import", {"records": [wire_record(1, confidence=True)]}, "records[0]:"),
    ("/import", {"records": ["not an object"]}, "records[0] must be an object"),
    ("/import", {"records": [wire_record(1, text="")]}, "records[0]:"),
    ("/export", {"scopeKey": ORG}, "limit is required"),
    ("/export", {"scopeKey": ORG, "limit": MAX_EXPORT_PAGE + 1}, "limit must be an integer"),
    ("/export", {"scopeKey": ORG, "limit": 5, "after": -1}, "after must be an integer"),
    ("/export", {"scopeKey": ORG, "limit": 5, "after": "3"}, "after must be an integer"),
    ("/export", {"limit": 5}, "scopeKey is required"),
    ("/scopes", {}, "limit is required"),
    ("/scopes", {"limit": MAX_SCOPES_PAGE + 1}, "limit must be an integer"),
    ("/scopes", {"limit": 5, "after": ""}, "after"),
])
async def test_hostile_bodies_are_refused_with_a_reason(client, spy, path, body, says):
    status, answer = await post(client, path, body)
    assert status == 400
    assert says in answer["error"], answer
    assert not [call for call in spy.calls if call[0] == "import"]
    assert await spy.inner.export_scopes() == []


async def test_a_lone_surrogate_is_refused(client, spy):
    raw = ('{"records": [' + json.dumps(wire_record(1))[:-1]
           + ', "sourceRunId": "\\ud800"}]}')
    response = await client.post("/import", data=raw.encode(), headers={
        **AUTH, "Content-Type": "application/json"})
    assert response.status == 400
    assert "lone surrogate" in (await response.json())["error"]


@pytest.mark.parametrize("path", ["/scopes", "/export", "/import"])
async def test_the_routes_need_the_bearer(client, path):
    status, answer = await post(client, path, {"limit": 1}, headers={})
    assert status == 401 and answer["error"]


async def test_a_store_that_cannot_move_records_is_a_501(aiohttp_client):
    client = await aiohttp_client(create_app(NullStore(), TOKEN))
    for path, body in (("/scopes", {"limit": 5}), ("/export", {"scopeKey": ORG, "limit": 5}),
                       ("/import", {"records": [wire_record(1)]})):
        status, answer = await post(client, path, body)
        assert status == 501 and "cannot" in answer["error"], (path, answer)


async def test_the_client_splits_imports_and_pages_scopes(spy, monkeypatch):
    monkeypatch.setattr("scopemem.stores.worker_calls.MAX_SCOPES_PAGE", 2)
    long_text = "ü" * 4000  # two bytes a character: a few fill an import body's bytes
    records = [Record(id=f"mem:user:slack:U{n}:1", scope_key=f"user:slack:U{n}",
                      kind="fact", text=long_text, source_thread_key="t", created_at=n)
               for n in range(60)]
    async with running(create_app(spy, TOKEN)) as url:
        client = WorkerStore(url, TOKEN)
        try:
            assert await client.import_records(records) == 60
            bodies = [call[1] for call in spy.calls if call[0] == "import"]
            assert all(len(body) <= MAX_IMPORT_BATCH for body in bodies)
            assert sum(len(body) for body in bodies) == 60 and len(bodies) > 60 // 25
            with pytest.raises(StoreRefused, match="own scope"):
                await client.import_records([Record(
                    id="mem:org:other:1", scope_key=ORG, kind="fact", text="x",
                    source_thread_key="t", created_at=1)])
            assert len([call for call in spy.calls if call[0] == "import"]) == len(bodies)
            exported = [r async for r in export_records(client)]
            assert sorted(r.id for r in exported) == sorted(r.id for r in records)
            assert len([call for call in spy.calls if call[0] == "scopes"]) == 30
        finally:
            await client.close()


async def test_an_import_the_worker_stops_partway_says_how_many_records_were_written(spy):
    """The client sends a 500-line batch in pages of 25: a page the worker fails after two
    were written leaves 50 records, and the import says so (and that running it again skips
    them), where it said no batch was written whole."""
    import_page = spy.inner.import_records
    pages = 0

    async def stopped_at_the_third_page(records: Any) -> int:
        nonlocal pages
        pages += 1
        if pages == 3:
            raise StoreError("the disk is full")
        return await import_page(records)

    spy.inner.import_records = stopped_at_the_third_page
    lines = b"".join(json.dumps(wire_record(n)).encode() + b"\n" for n in range(1, 101))
    async with running(create_app(spy, TOKEN)) as url:
        client = WorkerStore(url, TOKEN)
        try:
            with pytest.raises(click.ClickException) as refused:
                await import_stream(client, io.BytesIO(lines), "backup.jsonl", None,
                                    dry_run=False, trust_source=False)
            assert len([r async for r in export_records(client)]) == 50
        finally:
            await client.close()
    said = refused.value.message
    assert "50 records were written" in said and "no batch was written whole" not in said
    assert "importing the file again skips them" in said


def test_the_served_document_states_the_use_count_bound():
    record = json.loads(load_openapi())["components"]["schemas"]["ImportRecord"]
    assert record["properties"]["useCount"]["maximum"] == MAX_USE_COUNT
