"""The shipped OpenAPI document and the server agree: every documented (path, method, status)
is driven against a live server and answers as documented, and every route the server has is
documented."""

from __future__ import annotations

import json
import re
from typing import Any

import aiohttp
import pytest
from yarl import URL

from scopemem.core.scopes import identifier_problem
from scopemem.errors import ScopeLimitReached, StoreError, StoreUnsupported
from scopemem.worker_aiohttp import schema
from scopemem.worker_aiohttp.app import DATA_ROUTES, create_app, load_openapi, running
from tests.worker.conftest import AUTH, ORG, TOKEN, candidate, raw_exchange

DOC = json.loads(load_openapi())

VALID_BODIES: dict[str, dict[str, Any]] = {
    "/retrieve": {"scopeKey": ORG, "query": "license", "limit": 5},
    "/write": {"scopeKey": ORG, "records": [candidate()], "cap": 100},
    "/list": {"scopeKey": ORG, "limit": 5, "query": "license", "kind": "fact"},
    "/forget": {"scopeKey": ORG, "id": f"mem:{ORG}:1"},
    "/used": {"used": [{"scopeKey": ORG, "ids": [f"mem:{ORG}:1"]}]},
    "/sweep": {"scopeKey": ORG, "dryRun": True},
    "/scopes": {"limit": 10, "after": "org:a"},
    "/export": {"scopeKey": ORG, "after": 0, "limit": 10},
    "/import": {"records": [{"id": f"mem:{ORG}:7", "scopeKey": ORG, "kind": "fact",
                             "text": "run npm ci first", "keywords": [],
                             "sourceThreadKey": "slack:C1/1", "createdAt": 1,
                             "useCount": 0, "status": "active"}]},
    "/counts": {"counts": [{"scopeKey": ORG, "day": 20000, "name": "offered", "value": 2}]},
    "/stats": {"scopeKey": ORG, "since": 0},
    "/delete-scope": {"scopeKey": ORG},
    "/scrub-provenance": {"scopeKey": ORG, "personKey": "user:slack:U0123"},
    "/purge": {},
    # Browsing. A body of only optional fields is {} (the 400 case sends a list instead).
    "/scope-page": {},
    "/record-page": {"scopeKey": ORG, "status": "active", "limit": 5},
    "/record-history": {"scopeKey": ORG, "id": f"mem:{ORG}:1"},
    "/count-totals": {"kind": "org", "sinceDay": 20000},
    "/log-reaches": {"reaches": [{"recordId": f"mem:{ORG}:1", "scopeKey": ORG,
                                  "runId": "r-1", "threadKey": "", "atMs": 1}]},
    "/reaches": {},
    # The semantic lane: 1.0 as one float32, in base64.
    "/vectors-missing": {"scopeKey": ORG, "model": "fake/m", "limit": 5},
    "/put-vectors": {"scopeKey": ORG, "model": "fake/m",
                     "vectors": [{"id": f"mem:{ORG}:1", "vector": "AACAPw=="}]},
    "/nearest": {"scopeKey": ORG, "model": "fake/m", "vector": "AACAPw==", "limit": 5,
                 "floor": 0.3, "include": [f"mem:{ORG}:1"]},
}


def documented() -> list[tuple[str, str, int]]:
    return [(path, method, int(status))
            for path, item in DOC["paths"].items()
            for method, operation in item.items()
            for status in operation["responses"]]


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        target: Any = DOC
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def response_schema(path: str, method: str, status: int) -> dict[str, Any]:
    response = resolve(DOC["paths"][path][method]["responses"][str(status)])
    return resolve(response["content"]["application/json"]["schema"])


def test_the_document_is_openapi_3_with_every_route():
    assert DOC["openapi"].startswith("3.")
    app = create_app(object(), TOKEN)  # type: ignore[arg-type]  (never started)
    served = {(route.resource.canonical, route.method.lower())
              for route in app.router.routes() if route.method != "HEAD"}
    in_doc = {(path, method) for path, item in DOC["paths"].items() for method in item}
    assert served == in_doc
    assert {path for path, _ in served} == {*DATA_ROUTES, "/metrics", "/healthz", "/readyz",
                                            "/openapi.json"}


async def _chunks():
    yield json.dumps(VALID_BODIES["/list"]).encode()


async def drive(session: aiohttp.ClientSession, url: str, spy, path: str, method: str,
                status: int) -> tuple[int, Any]:
    """Make the server answer ``status`` on ``method path``; its status and JSON body."""
    body = VALID_BODIES.get(path)
    if status == 413:  # a client library would insist on sending the body: write it by hand
        raw = (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
               f"Content-Length: {600 * 1024}\r\n\r\n").encode()
        got, answer = await raw_exchange(URL(url).port, raw)
        return got, json.loads(answer)
    kwargs: dict[str, Any] = {"headers": dict(AUTH)}
    if method == "post":
        kwargs["json"] = body
    if status == 400:
        kwargs["json"] = {} if body else []  # a route whose fields are all optional
    elif status == 401:
        kwargs["headers"] = {}
    elif status == 411:
        kwargs.pop("json")
        kwargs["data"] = _chunks()
    elif status == 415:
        kwargs.pop("json")
        kwargs["data"] = json.dumps(body).encode()
        kwargs["headers"]["Content-Encoding"] = "gzip"
    elif status == 500:
        spy.fail = RuntimeError("the disk is on fire")
    elif status == 507:
        spy.fail = ScopeLimitReached("the data directory holds 1 scopes, the limit")
    elif status == 501:
        spy.fail = StoreUnsupported("the null store cannot export or import records")
    elif status == 503:  # /readyz: the store cannot serve
        spy.fail = StoreError("the disk is gone")
    try:
        async with session.request(method, url + path, **kwargs) as response:
            if response.content_type == "text/plain":  # /metrics: Prometheus' text format
                return response.status, await response.text()
            return response.status, await response.json(content_type=None)
    finally:
        spy.fail = None


async def test_every_documented_status_is_what_the_server_does(spy):
    triples = documented()
    assert {status for _, _, status in triples} == {200, 400, 401, 411, 413, 415, 500, 501, 503,
                                                             507}
    async with running(create_app(spy, TOKEN)) as url, aiohttp.ClientSession() as session:
        for path, method, status in triples:
            got, answer = await drive(session, url, spy, path, method, status)
            assert got == status, (path, method, status, answer)
            if isinstance(answer, str):
                assert "text/plain" in resolve(
                    DOC["paths"][path][method]["responses"][str(status)])["content"]
                continue
            schema = response_schema(path, method, status)
            missing = set(schema.get("required", ())) - set(answer)
            assert not missing, (path, method, status, missing)


@pytest.mark.parametrize("path", list(DATA_ROUTES))
async def test_documented_required_fields_are_required(client, path):
    schema = resolve(DOC["paths"][path]["post"]["requestBody"]["content"]["application/json"]
                     ["schema"])
    assert set(schema["required"]) <= set(VALID_BODIES[path])
    for field in schema["required"]:
        body = {key: value for key, value in VALID_BODIES[path].items() if key != field}
        response = await client.post(path, json=body, headers=AUTH)
        assert response.status == 400
        assert field in (await response.json())["error"]
    response = await client.post(path, json=VALID_BODIES[path], headers=AUTH)
    assert response.status == 200


def test_the_shipped_document_states_the_schemas_the_server_validates_with():
    """``openapi.json``'s request bodies are ``schema.py``'s, the ones ``validation.py``
    compiles (rewrite the file with ``python -m scopemem.worker_aiohttp.schema``)."""
    assert load_openapi().decode() == schema.render(schema.document(DOC))
    for path in DATA_ROUTES:
        body = DOC["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        assert body["schema"] == schema.REQUESTS[path]


def test_the_key_pattern_forbids_exactly_what_the_key_rule_forbids():
    """Every code point (but surrogates, which no JSON text holds alone): refused by
    ``identifier_problem`` exactly when the document's pattern refuses it. The pattern is
    read as JSON Schema reads it (ECMA-262: ``$`` is the end of the text, Python's ``\\Z``)."""
    pattern = re.compile(schema.KEY_PATTERN.replace("$", r"\Z"))
    forbidden = {cp for first, last in schema.FORBIDDEN_IN_KEYS for cp in range(first, last + 1)}
    assert all(identifier_problem(f"k{chr(cp)}", max_chars=4) is not None
               and not pattern.search(f"k{chr(cp)}") for cp in forbidden)
    allowed = [chr(cp) for cp in range(0x110000)
               if cp not in forbidden and not 0xD800 <= cp <= 0xDFFF]
    for start in range(0, len(allowed), 4096):  # a block at a time: the rule is per character
        block = "".join(allowed[start:start + 4096])
        assert identifier_problem(block, max_chars=len(block)) is None, start
        assert pattern.search(block), start
