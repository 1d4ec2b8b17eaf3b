"""The worker's browsing routes: a hostile body is a 400 naming what was wrong (never a
store failure), a store that cannot browse a 501, and nothing without the token. Against a
live server on loopback; what the routes answer is the store contract's
(``tests/stores/test_browsing.py``, over the worker client)."""

from __future__ import annotations

from typing import Any

import pytest

from scopemem.core.records import CountRow
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.null import NullStore
from scopemem.worker_aiohttp.app import create_app
from tests.conftest import FakeClock, fact
from tests.worker.conftest import AUTH, ORG, TOKEN


@pytest.fixture
def backing(clock: FakeClock) -> InMemoryStore:
    return InMemoryStore(clock=clock)


@pytest.fixture
async def served(aiohttp_client, backing: InMemoryStore):
    return await aiohttp_client(create_app(backing, TOKEN))


def reach(**fields: Any) -> dict[str, Any]:
    return {"recordId": f"mem:{ORG}:1", "scopeKey": ORG, "runId": "r-1",
            "threadKey": "slack:C1/1", "atMs": 5, **fields}


BAD_BODIES = [
    ("/scope-page", {"sort": "text"}, "sort"),
    ("/scope-page", {"limit": 0}, "limit"),
    ("/scope-page", {"limit": 201}, "limit"),
    ("/scope-page", {"offset": -1}, "offset"),
    ("/scope-page", {"offset": "1"}, "offset"),
    ("/scope-page", {"kind": "re po"}, "kind"),
    ("/scope-page", {"descending": "yes"}, "descending"),
    ("/record-page", {}, "scopeKey"),
    ("/record-page", {"scopeKey": "org:a\u200b"}, "scopeKey"),
    ("/record-page", {"scopeKey": ORG, "status": "gone"}, "status"),
    ("/record-page", {"scopeKey": ORG, "kind": "lesson"}, "kind"),
    ("/record-page", {"scopeKey": ORG, "source": "bot"}, "source"),
    ("/record-history", {"scopeKey": ORG}, "id"),
    ("/record-history", {"scopeKey": ORG, "id": "x\ny"}, "id"),
    ("/log-reaches", {"reaches": [reach(recordId="mem:org:other:1")]}, "scope"),
    ("/log-reaches", {"reaches": [reach(recordId="not-an-id")]}, "memory id"),
    ("/log-reaches", {"reaches": [reach(atMs=-1)]}, "atMs"),
    ("/log-reaches", {"reaches": [reach(runId=5)]}, "runId"),
    ("/log-reaches", {"reaches": [reach(runId="x" * 201)]}, "runId"),
    ("/log-reaches", {"reaches": [reach()] * 257}, "reaches"),
    ("/count-totals", {}, "kind"),
    ("/count-totals", {"kind": "re po"}, "kind"),
    ("/count-totals", {"kind": "repo", "sinceDay": -1}, "sinceDay"),
    ("/reaches", {"limit": 0}, "limit"),
    ("/reaches", {"run": ""}, "run"),
    ("/reaches", {"run": "r", "recordId": f"mem:{ORG}:1"}, "recordId"),
]


@pytest.mark.parametrize(("path", "body", "named"), BAD_BODIES)
async def test_a_hostile_body_is_a_400_naming_what_was_wrong(served, backing, path, body,
                                                            named):
    response = await served.post(path, json=body, headers=AUTH)
    assert response.status == 400
    reason = (await response.json())["error"]
    assert named.lower() in reason.lower()
    assert await backing.read_reaches() == []


async def test_the_routes_answer_what_the_store_holds(served, backing, clock):
    await backing.write(ORG, [fact("deploys need the vpn")])
    response = await served.post("/log-reaches", json={"reaches": [reach(atMs=clock.now)]},
                                 headers=AUTH)
    assert await response.json() == {"ok": True, "logged": 1}
    page = await (await served.post("/scope-page", json={}, headers=AUTH)).json()
    assert page == {"total": 1, "scopes": [{"scopeKey": ORG, "kind": "org", "active": 1,
                                            "lastWriteMs": clock.now}]}
    history = await (await served.post("/record-history", json={
        "scopeKey": ORG, "id": f"mem:{ORG}:1"}, headers=AUTH)).json()
    assert history["found"] is True and history["reaches"] == [reach(atMs=clock.now)]
    missing = await served.post("/record-history", json={"scopeKey": ORG,
                                                          "id": f"mem:{ORG}:9"}, headers=AUTH)
    assert await missing.json() == {"found": False}


async def test_count_totals_answer_a_kinds_sums_by_day(served, backing):
    await backing.add_counts([CountRow("repo:a/b", 3, "inserted", 2),
                              CountRow("repo:a/c", 3, "inserted", 5),
                              CountRow("org:acme", 3, "inserted", 7)])
    response = await served.post("/count-totals", json={"kind": "repo", "sinceDay": 2},
                                 headers=AUTH)
    assert await response.json() == {"totals": [{"day": 3, "name": "inserted", "total": 7,
                                                 "most": 5}]}


async def test_without_the_token_nothing_is_read(served):
    for path in ("/scope-page", "/reaches", "/count-totals"):
        assert (await served.post(path, json={})).status == 401


async def test_a_store_that_cannot_browse_is_a_501(aiohttp_client):
    class Plain(NullStore):
        scope_page = None  # not a BrowsingStore

    client = await aiohttp_client(create_app(Plain(), TOKEN))
    for path, body in (("/scope-page", {}), ("/count-totals", {"kind": "repo"})):
        response = await client.post(path, json=body, headers=AUTH)
        assert response.status == 501 and "browse" in (await response.json())["error"]
