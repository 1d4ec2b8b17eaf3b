"""The worker's routes through pytest-aiohttp: answers, auth, routing, validation, logs."""

from __future__ import annotations

import json
import logging

import pytest

from scopemem.core.records import Kind
from scopemem.errors import StoreError, StoreRefused
from scopemem.stores.sqlite_shared import SharedSqliteStore
from scopemem.worker_aiohttp.app import create_app
from tests.worker.conftest import AUTH, ORG, TOKEN, candidate

STATUS_LINE = "PR 1835 was pushed at sha 3f9a2c1 with all 10512 tests passing"


async def post(client, path, body, headers=AUTH):
    response = await client.post(path, json=body, headers=headers)
    return response.status, await response.json()


# --- happy paths --------------------------------------------------------------------------------


async def test_write_then_retrieve_round_trip(client, spy):
    status, body = await post(client, "/write", {"scopeKey": ORG, "records": [
        candidate(keywords=["license"], confidence=0.8, sourceRunId="r-1"),
        candidate("the deploy thread", kind="summary"),
    ]})
    assert status == 200
    assert body == {"ok": True, "inserted": 2, "deduped": 0, "superseded": 0, "restated": 0,
                    "evicted": 0, "outranked": 0, "insertedSummaries": 1, "dropped": 0}
    assert spy.calls[0][3] is None  # no cap sent → the store's own default
    status, body = await post(client, "/retrieve", {"scopeKey": ORG, "query": "license",
                                                    "limit": 5})
    assert status == 200
    [record] = body["records"]
    assert record["id"] == f"mem:{ORG}:1" and record["scopeKey"] == ORG
    assert record["sourceThreadKey"] == "slack:C1/100" and record["sourceRunId"] == "r-1"
    assert record["keywords"] == ["license"] and record["confidence"] == 0.8
    assert record["useCount"] == 1 and isinstance(record["lastUsedAt"], int)
    assert record["status"] == "active"
    assert None not in record.values()
    assert spy.calls[-1] == ("retrieve", ORG, "license", 5)


async def test_noise_on_write_is_dropped_and_answered(client):
    status, body = await post(client, "/write", {"scopeKey": ORG, "records": [
        candidate("ok"), candidate("!!"), candidate("Tool called: bash ls"), candidate()]})
    assert status == 200
    assert (body["inserted"], body["dropped"]) == (1, 3)
    status, body = await post(client, "/list", {"scopeKey": ORG, "limit": 10})
    assert [record["text"] for record in body["records"]] == [candidate()["text"]]


async def test_a_retrieve_without_bump_counts_nothing_and_used_marks_what_was_shown(
        client, spy):
    await post(client, "/write", {"scopeKey": ORG, "records": [
        candidate("the license check runs nightly"), candidate("license scans need a token")]})
    status, body = await post(client, "/retrieve", {"scopeKey": ORG, "query": "license",
                                                    "limit": 5, "bump": False})
    assert status == 200 and body["bumped"] is False
    assert len(body["matches"]) == len(body["records"]) == 2
    assert all(0 < match <= 1 for match in body["matches"])
    assert all(record["useCount"] == 0 for record in body["records"])
    shown = body["records"][0]["id"]
    status, body = await post(client, "/used", {"used": [
        {"scopeKey": ORG, "ids": [shown, f"mem:{ORG}:99", "mem:org:other:1"]}]})
    # Only the active record of that scope is marked; another scope's id never is.
    assert (status, body) == (200, {"ok": True, "marked": 1})
    listed = {r.id: r.use_count for r in await spy.inner.list(ORG, 10)}
    assert listed[shown] == 1 and sum(listed.values()) == 1
    # The seed's clients send no bump and get today's behaviour.
    status, body = await post(client, "/retrieve", {"scopeKey": ORG, "query": "license",
                                                    "limit": 5})
    assert body["bumped"] is True
    assert {r["id"]: r["useCount"] for r in body["records"]}[shown] == 2


def write_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("[write]")]


async def test_write_passes_cap_and_reports_eviction(client, spy, caplog):
    caplog.set_level(logging.INFO, logger="scopemem.worker")
    await post(client, "/write", {"scopeKey": ORG, "records": [candidate("alpha one")]})
    assert write_lines(caplog) == []
    status, body = await post(client, "/write", {
        "scopeKey": ORG, "cap": 1, "records": [candidate("beta two"), candidate("gamma three")]})
    assert status == 200 and body["inserted"] == 2 and body["evicted"] == 2
    assert spy.calls[-1][3] == 1
    assert write_lines(caplog) == [f"[write] {ORG} <- 2 candidates (evicted 2)"]
    assert "gamma" not in caplog.text and "beta" not in caplog.text


async def test_a_worker_serving_sqlite_logs_an_eviction_once(aiohttp_client, tmp_path, clock,
                                                             caplog):
    # Every logger, not only the worker's: the store's own would show up here too.
    caplog.set_level(logging.INFO)
    store = SharedSqliteStore(tmp_path / "data", clock=clock)
    client = await aiohttp_client(create_app(store, TOKEN))
    status, body = await post(client, "/write", {
        "scopeKey": ORG, "cap": 1, "records": [candidate("alpha one"), candidate("beta two")]})
    assert status == 200 and body["inserted"] == 2 and body["evicted"] == 1
    assert write_lines(caplog) == [f"[write] {ORG} <- 2 candidates (evicted 1)"]


async def test_empty_batch_is_fine(client):
    status, body = await post(client, "/write", {"scopeKey": ORG, "records": []})
    assert status == 200 and body["inserted"] == 0


async def test_unknown_keys_are_ignored(client, spy):
    status, _ = await post(client, "/write", {"scopeKey": ORG, "future": 1, "records": [
        candidate(audience="org", embedding=[0.1])]})
    assert status == 200
    status, _ = await post(client, "/list", {"scopeKey": ORG, "limit": 5, "cursor": "x"})
    assert status == 200


async def test_list_with_query_and_kind(client, spy, caplog):
    caplog.set_level(logging.INFO, logger="scopemem.worker")
    await post(client, "/write", {"scopeKey": ORG, "records": [
        candidate("deploy via ci"), candidate("deploy summary", kind="summary"),
        candidate("unrelated")]})
    status, body = await post(client, "/list", {"scopeKey": ORG, "limit": 10})
    assert status == 200
    assert [r["text"] for r in body["records"]] == ["unrelated", "deploy summary",
                                                    "deploy via ci"]
    status, body = await post(client, "/list", {"scopeKey": ORG, "limit": 10,
                                                "query": "deploy", "kind": "fact"})
    assert [r["text"] for r in body["records"]] == ["deploy via ci"]
    assert spy.calls[-1] == ("list", ORG, 10, "deploy", Kind.FACT)
    assert all(r["useCount"] == 0 for r in body["records"])
    messages = [r.getMessage() for r in caplog.records if "[list]" in r.getMessage()]
    assert messages == [f"[list] {ORG} -> 3", f"[list] {ORG} -> 1"]
    assert "deploy via ci" not in caplog.text


async def test_forget(client, caplog):
    caplog.set_level(logging.INFO, logger="scopemem.worker")
    await post(client, "/write", {"scopeKey": ORG, "records": [candidate("forget me")]})
    record_id = f"mem:{ORG}:1"
    assert await post(client, "/forget", {"scopeKey": ORG, "id": record_id}) == (
        200, {"ok": True, "forgotten": True})
    assert await post(client, "/forget", {"scopeKey": ORG, "id": record_id}) == (
        200, {"ok": True, "forgotten": False})
    messages = [r.getMessage() for r in caplog.records if "[forget]" in r.getMessage()]
    assert messages == [f"[forget] {ORG} {record_id} -> true",
                        f"[forget] {ORG} {record_id} -> false"]
    assert "forget me" not in caplog.text


async def test_sweep_dry_run_then_real(client, caplog):
    caplog.set_level(logging.INFO, logger="scopemem.worker")
    await post(client, "/write", {"scopeKey": ORG, "records": [
        candidate(STATUS_LINE), candidate("run npm ci before the license check")]})
    assert await post(client, "/sweep", {"scopeKey": ORG, "dryRun": True}) == (
        200, {"ok": True, "swept": 1, "ids": [f"mem:{ORG}:1"]})
    assert await post(client, "/sweep", {"scopeKey": ORG}) == (200, {"ok": True, "swept": 1})
    assert await post(client, "/sweep", {"scopeKey": ORG, "dryRun": False}) == (
        200, {"ok": True, "swept": 0})
    messages = [r.getMessage() for r in caplog.records if "[sweep]" in r.getMessage()]
    assert messages == [f"[sweep] {ORG} -> 1 (dry run)", f"[sweep] {ORG} -> 1",
                        f"[sweep] {ORG} -> 0"]
    assert "10512" not in caplog.text


async def test_healthz_needs_no_token(client):
    response = await client.get("/healthz")
    assert response.status == 200 and await response.json() == {"ok": True}


async def test_openapi_is_served_without_a_token(client):
    response = await client.get("/openapi.json")
    assert response.status == 200
    assert response.content_type == "application/json"
    document = json.loads(await response.read())
    assert document["openapi"].startswith("3.")


# --- auth ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer wrong-token"},
    {"Authorization": f"Basic {TOKEN}"},
    {"Authorization": f"Token {TOKEN}"},
    {"Authorization": "Bearer"},
    {"Authorization": "Bearer "},
    {"Authorization": TOKEN},
    {"Authorization": f"Bearer {TOKEN}x"},
    {"Authorization": f"Bearer {TOKEN[:-1]}"},
], ids=["missing", "wrong", "basic", "other-scheme", "no-token", "blank-token", "bare",
        "longer", "prefix"])
async def test_bad_credentials_are_401(client, spy, headers):
    for path in ("/retrieve", "/write", "/list", "/forget", "/sweep"):
        response = await client.post(path, json={"scopeKey": ORG}, headers=headers)
        assert response.status == 401, path
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert "error" in await response.json()
    assert spy.calls == []


async def test_two_authorization_headers_are_401(client, spy):
    from multidict import CIMultiDict

    headers = CIMultiDict([("Authorization", f"Bearer {TOKEN}"),
                           ("Authorization", f"Bearer {TOKEN}")])
    response = await client.post("/list", json={"scopeKey": ORG, "limit": 1}, headers=headers)
    assert response.status == 401 and spy.calls == []


async def test_scheme_is_case_insensitive(client):
    status, _ = await post(client, "/list", {"scopeKey": ORG, "limit": 1},
                           headers={"Authorization": f"bearer {TOKEN}"})
    assert status == 200


@pytest.mark.parametrize("server_token", [None, ""])
async def test_an_unset_server_token_admits_nobody(aiohttp_client, spy, server_token):
    client = await aiohttp_client(create_app(spy, server_token))
    for headers in ({}, {"Authorization": "Bearer "}, {"Authorization": "Bearer"},
                    {"Authorization": "Bearer None"}):
        response = await client.post("/list", json={"scopeKey": ORG, "limit": 1},
                                     headers=headers)
        assert response.status == 401
    assert (await client.get("/healthz")).status == 200
    assert spy.calls == []


def test_a_token_with_spaces_or_non_ascii_is_refused_at_startup(spy):
    for token in ("two words", "caf\u00e9", "tab\there"):
        with pytest.raises(ValueError, match="printable ASCII"):
            create_app(spy, token)


# --- routing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/"), ("POST", "/nope"), ("GET", "/retrieve/"), ("POST", "/write/x"),
    ("GET", "/healthz/"), ("DELETE", "/records/1"),
])
async def test_unknown_paths_are_404(client, method, path):
    response = await client.request(method, path, headers=AUTH)
    assert response.status == 404
    assert (await response.json())["error"]


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/retrieve"), ("PUT", "/write"), ("DELETE", "/forget"), ("GET", "/list"),
    ("PATCH", "/sweep"), ("POST", "/healthz"), ("POST", "/openapi.json"),
])
async def test_wrong_method_is_405(client, spy, method, path):
    response = await client.request(method, path, headers=AUTH)
    assert response.status == 405
    assert response.headers["Allow"]
    assert (await response.json())["error"]
    # Without a token too: the method is wrong whoever asks.
    assert (await client.request(method, path)).status == 405
    assert spy.calls == []


# --- validation ---------------------------------------------------------------------------------

LONG = "x" * 4001

BAD_BODIES = [
    # scopeKey, on every route
    ("/retrieve", {"query": "q", "limit": 1}, "scopeKey is required"),
    ("/retrieve", {"scopeKey": "", "query": "q", "limit": 1}, "scopeKey must not be empty"),
    ("/retrieve", {"scopeKey": 7, "query": "q", "limit": 1}, "scopeKey must be a string"),
    ("/list", {"scopeKey": "org acme", "limit": 1}, "scopeKey must not contain whitespace"),
    ("/write", {"scopeKey": "org:\u0007", "records": []}, "scopeKey must not contain"),
    ("/forget", {"scopeKey": "o" * 201, "id": "x"}, "scopeKey must be at most 200"),
    ("/list", {"scopeKey": "org:acme\u200b", "limit": 1}, "scopeKey must not contain invisible"),
    ("/retrieve", {"scopeKey": "org:\u202eemca", "query": "q", "limit": 1},
     "scopeKey must not contain invisible"),
    ("/write", {"scopeKey": "org:acme\U000e0041", "records": []},
     "scopeKey must not contain invisible"),
    ("/sweep", {"scopeKey": None}, "scopeKey must be a string"),
    # query
    ("/retrieve", {"scopeKey": ORG, "limit": 1}, "query is required"),
    ("/retrieve", {"scopeKey": ORG, "query": 5, "limit": 1}, "query must be a string"),
    ("/retrieve", {"scopeKey": ORG, "query": "q" * 4001, "limit": 1},
     "query must be at most 4000"),
    ("/list", {"scopeKey": ORG, "limit": 1, "query": ["a"]}, "query must be a string"),
    ("/list", {"scopeKey": ORG, "limit": 1, "query": "q" * 4001}, "query must be at most 4000"),
    # limit
    ("/retrieve", {"scopeKey": ORG, "query": "q"}, "limit is required"),
    ("/retrieve", {"scopeKey": ORG, "query": "q", "limit": 0}, "limit must be an integer"),
    ("/retrieve", {"scopeKey": ORG, "query": "q", "limit": 51}, "limit must be an integer"),
    ("/list", {"scopeKey": ORG, "limit": 2.5}, "limit must be an integer"),
    ("/list", {"scopeKey": ORG, "limit": True}, "limit must be an integer"),
    ("/list", {"scopeKey": ORG, "limit": "5"}, "limit must be an integer"),
    ("/list", {"scopeKey": ORG}, "limit is required"),
    # kind on /list
    ("/list", {"scopeKey": ORG, "limit": 1, "kind": "lesson"}, "kind must be one of"),
    ("/list", {"scopeKey": ORG, "limit": 1, "kind": None}, "kind must be one of"),
    # records
    ("/write", {"scopeKey": ORG}, "records is required"),
    ("/write", {"scopeKey": ORG, "records": {"a": 1}}, "records must be a list"),
    ("/write", {"scopeKey": ORG, "records": [candidate()] * 51}, "records must hold at most 50"),
    ("/write", {"scopeKey": ORG, "records": ["text"]}, "records[0] must be an object"),
    ("/write", {"scopeKey": ORG, "records": [candidate(), {"text": "t",
                                                           "sourceThreadKey": "t"}]},
     "records[1].kind is required"),
    ("/write", {"scopeKey": ORG, "records": [candidate(kind="lesson")]},
     "records[0].kind must be one of"),
    ("/write", {"scopeKey": ORG, "records": [candidate(text="")]},
     "records[0].text must be a non-empty string"),
    ("/write", {"scopeKey": ORG, "records": [candidate(text=3)]},
     "records[0].text must be a non-empty string"),
    ("/write", {"scopeKey": ORG, "records": [candidate(text=LONG)]},
     "records[0].text must be at most 4000"),
    ("/write", {"scopeKey": ORG, "records": [{"kind": "fact", "text": "t"}]},
     "records[0].sourceThreadKey is required"),
    ("/write", {"scopeKey": ORG, "records": [candidate(sourceThreadKey="")]},
     "records[0].sourceThreadKey must be a non-empty string"),
    ("/write", {"scopeKey": ORG, "records": [candidate(keywords="deploy")]},
     "records[0].keywords must be a list of strings"),
    ("/write", {"scopeKey": ORG, "records": [candidate(keywords=["k"] * 21)]},
     "records[0].keywords must hold at most 20"),
    ("/write", {"scopeKey": ORG, "records": [candidate(keywords=["ok", 5])]},
     "records[0].keywords[1] must be a string of at most 64"),
    ("/write", {"scopeKey": ORG, "records": [candidate(keywords=["k" * 65])]},
     "records[0].keywords[0] must be at most 64 characters"),
    ("/write", {"scopeKey": ORG, "records": [candidate(sourceRunId=17)]},
     "records[0].sourceRunId must be a string"),
    ("/write", {"scopeKey": ORG, "records": [candidate(source="oracle")]},
     "records[0].source must be one of: human, reflection"),
    ("/write", {"scopeKey": ORG, "records": [candidate(confidence=1.5)]},
     "records[0].confidence must be a number from 0 to 1"),
    ("/write", {"scopeKey": ORG, "records": [candidate(confidence=-0.1)]},
     "records[0].confidence must be a number from 0 to 1"),
    ("/write", {"scopeKey": ORG, "records": [candidate(confidence="high")]},
     "records[0].confidence must be a number from 0 to 1"),
    ("/write", {"scopeKey": ORG, "records": [candidate(confidence=True)]},
     "records[0].confidence must be a number from 0 to 1"),
    ("/write", {"scopeKey": ORG, "records": [candidate(supersedes=4)]},
     "records[0].supersedes must be a string"),
    ("/write", {"scopeKey": ORG, "records": [candidate(restates=["mem:x:1"])]},
     "records[0].restates must be a string"),
    # a pointer is a memory id (of any scope: one naming no record points at nothing)
    ("/write", {"scopeKey": ORG, "records": [candidate(supersedes="garbage id")]},
     "records[0].supersedes is not a memory id (mem:<scopeKey>:<n>)"),
    ("/write", {"scopeKey": ORG, "records": [candidate(), candidate(restates="garbage")]},
     "records[1].restates is not a memory id (mem:<scopeKey>:<n>)"),
    # provenance and pointers: the scope key's cap (a thread key of 500 KB is refused)
    ("/write", {"scopeKey": ORG, "records": [candidate(sourceThreadKey="t" * 201)]},
     "records[0].sourceThreadKey must be at most 200 characters"),
    ("/write", {"scopeKey": ORG, "records": [candidate(sourceRunId="r" * 201)]},
     "records[0].sourceRunId must be at most 200 characters"),
    ("/write", {"scopeKey": ORG, "records": [candidate(supersedes="m" * 201)]},
     "records[0].supersedes must be at most 200 characters"),
    ("/write", {"scopeKey": ORG, "records": [candidate(restates="m" * 201)]},
     "records[0].restates must be at most 200 characters"),
    # NUL, in any string field of a body: PostgreSQL cannot keep one, so no store takes it
    ("/write", {"scopeKey": ORG, "records": [candidate(), candidate(text="deploy\x00s")]},
     "records[1].text holds a NUL character"),
    ("/write", {"scopeKey": ORG, "records": [candidate(sourceThreadKey="slack:\x00")]},
     "records[0].sourceThreadKey holds a NUL character"),
    ("/write", {"scopeKey": ORG, "records": [candidate(sourceRunId="\x00")]},
     "records[0].sourceRunId holds a NUL character"),
    ("/write", {"scopeKey": ORG, "records": [candidate(keywords=["ok", "v\x00pn"])]},
     "records[0].keywords[1] holds a NUL character"),
    ("/write", {"scopeKey": ORG, "records": [candidate(supersedes="mem:org:acme:1\x00")]},
     "records[0].supersedes holds a NUL character"),
    ("/retrieve", {"scopeKey": ORG, "query": "vpn\x00", "limit": 1},
     "query holds a NUL character"),
    ("/list", {"scopeKey": ORG, "limit": 1, "query": "\x00"}, "query holds a NUL character"),
    # cap
    ("/write", {"scopeKey": ORG, "records": [], "cap": 0}, "cap must be an integer from 1 to"),
    ("/write", {"scopeKey": ORG, "records": [], "cap": 10001}, "cap must be an integer"),
    ("/write", {"scopeKey": ORG, "records": [], "cap": 3.5}, "cap must be an integer"),
    ("/write", {"scopeKey": ORG, "records": [], "cap": None}, "cap must be an integer"),
    # id
    ("/forget", {"scopeKey": ORG}, "id is required"),
    ("/forget", {"scopeKey": ORG, "id": ""}, "id must not be empty"),
    ("/forget", {"scopeKey": ORG, "id": 12}, "id must be a string"),
    ("/forget", {"scopeKey": ORG, "id": "mem:org:acme:1 2"}, "id must not contain whitespace"),
    ("/forget", {"scopeKey": ORG, "id": "m" * 201}, "id must be at most 200"),
    ("/forget", {"scopeKey": ORG, "id": "mem:org:acme\u2066:1"}, "id must not contain invisible"),
    # dryRun
    ("/sweep", {"scopeKey": ORG, "dryRun": "yes"}, "dryRun must be a boolean"),
    ("/sweep", {"scopeKey": ORG, "dryRun": 1}, "dryRun must be a boolean"),
    # bump, and the records a client showed
    ("/retrieve", {"scopeKey": ORG, "query": "q", "limit": 1, "bump": "no"},
     "bump must be a boolean"),
    ("/used", {}, "used is required"),
    ("/used", {"used": {"scopeKey": ORG}}, "used must be a list"),
    ("/used", {"used": [{"scopeKey": ORG, "ids": []}] * 33}, "used must hold at most 32"),
    ("/used", {"used": ["x"]}, "used[0] must be an object"),
    ("/used", {"used": [{"ids": []}]}, "used[0].scopeKey is required"),
    ("/used", {"used": [{"scopeKey": "", "ids": []}]}, "used[0].scopeKey must not be empty"),
    ("/used", {"used": [{"scopeKey": ORG, "ids": "x"}]}, "used[0].ids must be a list"),
    ("/used", {"used": [{"scopeKey": ORG, "ids": [7]}]}, "used[0].ids[0] must be a string"),
    ("/used", {"used": [{"scopeKey": ORG, "ids": ["mem:org:acme:1\ufeff"]}]},
     "used[0].ids[0] must not contain invisible"),
    ("/used", {"used": [{"scopeKey": ORG, "ids": ["x"] * 257}]},
     "used[0].ids must hold at most 256"),
    # a total JSON Schema cannot state (the document says it in words)
    ("/used", {"used": [{"scopeKey": ORG, "ids": ["x"] * 200},
                        {"scopeKey": "org:b", "ids": ["y"] * 57}]}, "at most 256 ids in all"),
]


@pytest.mark.parametrize(("path", "body", "reason"), BAD_BODIES,
                         ids=[f"{p}:{r[:40]}" for p, _b, r in BAD_BODIES])
async def test_bad_bodies_are_400_naming_the_field(client, spy, path, body, reason):
    status, answer = await post(client, path, body)
    assert status == 400
    assert reason in answer["error"]
    assert spy.calls == []


async def test_a_number_without_a_fraction_is_an_integer(client, spy):
    """JSON Schema's integer, as the served document states it: 5.0 and 1e1 are integers."""
    raw = b'{"scopeKey": "org:acme", "limit": 5.0, "query": "q"}'
    response = await client.post("/list", data=raw, headers=AUTH)
    assert response.status == 200
    raw = b'{"scopeKey": "org:acme", "limit": 1e1, "query": "q"}'
    assert (await client.post("/list", data=raw, headers=AUTH)).status == 200
    assert [call[2] for call in spy.calls] == [5, 10]
    assert all(type(call[2]) is int for call in spy.calls)


@pytest.mark.parametrize(("raw", "reason"), [
    (b"", "not valid JSON"),
    (b"{", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b'"scopeKey"', "must be a JSON object"),
    (b"null", "must be a JSON object"),
    (b'{"scopeKey": "org:acme", "limit": NaN}', "not valid JSON"),
    (b'{"scopeKey": "org:acme", "limit": Infinity}', "not valid JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
    ("\ufeff{}".encode(), "byte order mark"),
    (b"[" * 100_000, "not valid JSON"),
    (b'{"limit": ' + b"9" * 5000 + b"}", "not valid JSON"),
])
async def test_invalid_json_is_400(client, spy, raw, reason):
    response = await client.post("/list", data=raw, headers=AUTH)
    assert response.status == 400
    assert reason in (await response.json())["error"]
    assert spy.calls == []


async def test_supersedes_may_be_empty_and_non_ascii_text_round_trips(client):
    status, body = await post(client, "/write", {"scopeKey": ORG, "records": [
        candidate("le café ouvre à 8h", supersedes="", keywords=[])]})
    assert status == 200 and body["inserted"] == 1
    _, body = await post(client, "/retrieve", {"scopeKey": ORG, "query": "Café", "limit": 1})
    assert body["records"][0]["text"] == "le café ouvre à 8h"


# --- store failures -----------------------------------------------------------------------------


@pytest.mark.parametrize("failure", [StoreError("disk full at /secret/path"),
                                     RuntimeError("boom with private detail")])
async def test_a_store_failure_is_a_generic_500_and_is_logged(client, spy, caplog, failure):
    caplog.set_level(logging.ERROR, logger="scopemem.worker")
    spy.fail = failure
    status, body = await post(client, "/list", {"scopeKey": ORG, "limit": 1})
    assert status == 500
    assert "secret" not in body["error"] and "private" not in body["error"]
    assert any(r.levelno == logging.ERROR and "/list" in r.getMessage() for r in caplog.records)


async def test_input_the_store_refuses_is_a_400_not_a_500(client, spy):
    """A value the store itself refuses (PostgreSQL's ``DataError``) is the input's fault:
    a 400 with a JSON reason that says nothing of the store, so a client writes again in
    smaller pieces."""
    spy.fail = StoreRefused("postgres store: DataError: at /secret/path")
    status, body = await post(client, "/write", {"scopeKey": ORG, "records": [candidate()]})
    assert status == 400
    assert "refused" in body["error"] and "secret" not in body["error"]


@pytest.mark.parametrize(("path", "body", "method", "answer"), [
    ("/write", {"scopeKey": ORG, "records": [candidate()]}, "write", None),
    ("/forget", {"scopeKey": ORG, "id": f"mem:{ORG}:1"}, "forget", {"ok": 1}),
    ("/sweep", {"scopeKey": ORG}, "sweep", 3),
])
async def test_a_store_plugin_answering_the_wrong_type_is_a_store_failure_named_in_one_line(
        aiohttp_client, spy, caplog, monkeypatch, path, body, method, answer):
    """A plugin store's wrong answer is its failure, logged as one line naming the answer:
    never a traceback in the worker's log, nor a dict sent back as ``forgotten``."""
    async def wrong(*_args, **_kwargs):
        return answer

    monkeypatch.setattr(spy, method, wrong)
    client = await aiohttp_client(create_app(spy, TOKEN))
    with caplog.at_level(logging.INFO, logger="scopemem"):
        status, reply = await post(client, path, body)
    assert (status, reply["error"]) == (500, "the store failed; see the worker's log")
    failed = [r for r in caplog.records if "failed in the store" in r.getMessage()]
    assert len(failed) == 1 and f"answered {method} with" in failed[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)
