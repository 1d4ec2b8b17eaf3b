"""The worker's routes of the semantic lane: a hostile body or vector is a 400 naming what
was wrong (never a store failure), a store without vectors a 501, and nothing without the
token. Against a live server on loopback; what the routes answer is the store contract's
(``tests/stores/test_vectors.py``, over the worker client)."""

from __future__ import annotations

import base64

import pytest

from scopemem.stores.memory import InMemoryStore
from scopemem.stores.null import NullStore
from scopemem.stores.shared.vectors import pack
from scopemem.worker_aiohttp.app import create_app
from tests.conftest import FakeClock, fact
from tests.worker.conftest import AUTH, ORG, TOKEN

MODEL = "fake/concepts"


def wire(values: list[float]) -> str:
    return base64.b64encode(pack(values)).decode()


def put(*vectors: str, model: str = MODEL, record: str = f"mem:{ORG}:1") -> dict:
    return {"scopeKey": ORG, "model": model,
            "vectors": [{"id": record, "vector": vector} for vector in vectors]}


def near(vector: str, **fields: object) -> dict:
    return {"scopeKey": ORG, "model": MODEL, "vector": vector, "limit": 5, "floor": 0.0,
            **fields}


@pytest.fixture
async def backing(clock: FakeClock) -> InMemoryStore:
    store = InMemoryStore(clock=clock)
    await store.write(ORG, [fact("deploys need the vpn"), fact("redis keys expire")])
    return store


@pytest.fixture
async def served(aiohttp_client, backing: InMemoryStore):
    return await aiohttp_client(create_app(backing, TOKEN))


BAD_BODIES = [
    ("/put-vectors", put("AAAAAAA="), "multiple of 4"),          # 5 bytes
    ("/put-vectors", put("not base64!"), "vector"),
    ("/put-vectors", put(wire([float("nan"), 1.0])), "not finite"),
    ("/put-vectors", put(wire([float("inf")])), "not finite"),
    ("/put-vectors", put(wire([0.0, 0.0])), "length zero"),
    ("/put-vectors", put(wire([1.0] * 4097)), "vector"),       # longer than the schema
    ("/put-vectors", put(wire([1.0, 0.0]), wire([1.0, 0.0, 0.0])), "dimensions"),
    ("/put-vectors", put(wire([1.0]), model="fake/\u00e9"), "model"),
    ("/put-vectors", put(wire([1.0]), model=""), "model"),
    ("/put-vectors", put(*[wire([1.0])] * 65), "vectors"),
    ("/put-vectors", put(wire([1.0]), record="x y"), "id"),
    ("/nearest", near(wire([1.0, 0.0]), limit=51), "limit"),
    ("/nearest", near(wire([1.0, 0.0]), floor=2), "floor"),
    ("/nearest", near(wire([1.0, 0.0]), floor="high"), "floor"),
    ("/nearest", near("AAAAAA=="), "length zero"),
    ("/nearest", near(wire([1.0, 0.0]), include=["a b"]), "include"),
    ("/vectors-missing", {"scopeKey": ORG, "model": MODEL, "limit": 0}, "limit"),
    ("/vectors-missing", {"scopeKey": ORG, "limit": 5}, "model"),
]


@pytest.mark.parametrize(("path", "body", "named"), BAD_BODIES)
async def test_a_hostile_body_is_a_400_naming_what_was_wrong(served, backing, path, body,
                                                            named):
    response = await served.post(path, json=body, headers=AUTH)
    assert response.status == 400, await response.text()
    assert named.lower() in (await response.json())["error"].lower()
    assert len(await backing.vectors_missing(ORG, MODEL, 10)) == 2  # nothing kept


async def test_a_vector_unlike_the_scopes_others_is_a_400(served):
    kept = await served.post("/put-vectors", json=put(wire([1.0, 0.0])), headers=AUTH)
    assert await kept.json() == {"ok": True, "kept": 1}
    for path, body in (("/put-vectors", put(wire([1.0, 0.0, 0.0]),
                                            record=f"mem:{ORG}:2")),
                       ("/nearest", near(wire([1.0, 0.0, 0.0])))):
        response = await served.post(path, json=body, headers=AUTH)
        assert response.status == 400
        assert "dimensions" in (await response.json())["error"]


async def test_the_routes_answer_what_the_store_holds(served):
    missing = await (await served.post("/vectors-missing", json={
        "scopeKey": ORG, "model": MODEL, "limit": 5}, headers=AUTH)).json()
    assert missing == {"missing": [{"id": f"mem:{ORG}:1", "text": "deploys need the vpn"},
                                   {"id": f"mem:{ORG}:2", "text": "redis keys expire"}]}
    await served.post("/put-vectors", json=put(wire([3.0, 4.0])), headers=AUTH)
    found = await (await served.post("/nearest", json=near(wire([0.0, 1.0])),
                                     headers=AUTH)).json()
    assert [record["id"] for record in found["records"]] == [f"mem:{ORG}:1"]
    assert found["cosines"] == [pytest.approx(0.8)]


async def test_without_the_token_nothing_is_read_or_kept(served, backing):
    for path, body in (("/vectors-missing", {}), ("/put-vectors", put(wire([1.0]))),
                       ("/nearest", near(wire([1.0])))):
        assert (await served.post(path, json=body)).status == 401
    assert len(await backing.vectors_missing(ORG, MODEL, 10)) == 2


async def test_a_store_without_vectors_is_a_501(aiohttp_client):
    client = await aiohttp_client(create_app(NullStore(), TOKEN))
    response = await client.post("/nearest", json=near(wire([1.0])), headers=AUTH)
    assert response.status == 501 and "vectors" in (await response.json())["error"]
