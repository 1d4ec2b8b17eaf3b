"""What an operator watches: /metrics' request, store and process series, the alert rules
docs/worker.md gives, and /readyz. Against the real server on loopback."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from scopemem.core.scopes import READINESS_SCOPE
from scopemem.errors import StoreBusy, StoreError, StoreRefused
from scopemem.worker_aiohttp.app import DATA_ROUTES, create_app, running
from tests.conftest import fact
from tests.worker.conftest import AUTH, ORG, TOKEN, candidate

DOCS = Path(__file__).parents[2] / "docs" / "worker.md"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(session: aiohttp.ClientSession, url: str) -> tuple[str, Samples]:
    async with session.get(url + "/metrics", headers=AUTH) as response:
        assert response.status == 200
        text = await response.text()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    return text, samples


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(value for (sample, pairs), value in samples.items()
               if sample == name and labels.items() <= dict(pairs).items())


async def test_requests_are_counted_by_route_and_status_with_bounded_labels(spy):
    async with running(create_app(spy, TOKEN)) as url, aiohttp.ClientSession() as session:
        body = {"scopeKey": ORG, "query": "npm", "limit": 3}
        for _ in range(3):
            async with session.post(url + "/retrieve", json=body, headers=AUTH) as response:
                assert response.status == 200
        async with session.post(url + "/retrieve", json={}, headers=AUTH) as response:
            assert response.status == 400
        async with session.post(url + "/write", json=body) as response:
            assert response.status == 401
        for n in range(20):  # paths a scanner invents: one series, not twenty
            async with session.get(f"{url}/wp-admin/{n}.php") as response:
                assert response.status == 404
        _, samples = await scrape(session, url)
    requests = "scopemem_worker_requests_total"
    assert total(samples, requests, route="/retrieve", status="200") == 3
    assert total(samples, requests, route="/retrieve", status="400") == 1
    assert total(samples, requests, route="/write", status="401") == 1
    assert total(samples, requests, route="other", status="404") == 20
    assert total(samples, "scopemem_worker_request_duration_seconds_count",
                 route="/retrieve") == 4
    routes = {dict(pairs)["route"] for name, pairs in samples if name == requests}
    assert routes <= {*DATA_ROUTES, "/metrics", "other"}
    # The store's calls are timed by method; every process series is there.
    assert total(samples, "scopemem_worker_store_operation_duration_seconds_count",
                 operation="search") == 4 - 1  # the 400 never reached the store
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                 "python_gc_collections_total", "python_info"):
        assert any(sample == name for sample, _ in samples), name


async def test_store_failures_are_counted_and_refusals_are_not(spy):
    async with running(create_app(spy, TOKEN)) as url, aiohttp.ClientSession() as session:
        write = {"scopeKey": ORG, "records": [candidate()]}
        for fail, status in ((StoreError("disk gone"), 500), (StoreBusy("pool empty"), 503),
                             (StoreRefused("too long"), 400)):
            spy.fail = fail
            async with session.post(url + "/write", json=write, headers=AUTH) as response:
                assert response.status == status
        spy.fail = None
        _, samples = await scrape(session, url)
    assert total(samples, "scopemem_worker_store_failures_total", operation="write") == 2
    assert total(samples, "scopemem_worker_store_failures_total") == 2
    assert total(samples, "scopemem_worker_requests_total", route="/write",
                 status="500") == 1
    assert total(samples, "scopemem_worker_requests_total", route="/write",
                 status="503") == 1


@pytest.mark.parametrize(("path", "body", "operation"), [
    ("/delete-scope", {"scopeKey": ORG}, "delete_scope"),
    ("/scrub-provenance", {"scopeKey": ORG, "personKey": "user:slack:U1"},
     "scrub_provenance"),
    ("/purge", {}, "purge"),
    ("/scope-page", {}, "scope_page"),
    ("/record-history", {"scopeKey": ORG, "id": f"mem:{ORG}:1"}, "record_history"),
    ("/count-totals", {"kind": "org"}, "read_count_totals"),
])
async def test_every_route_times_its_store_call_and_counts_its_failure(spy, path, body,
                                                                      operation):
    """Each store call is timed and its failure counted, whatever route made it: a store
    failing only its deletions or its browsing still shows in ``ScopememStoreFailing``."""
    async with running(create_app(spy, TOKEN)) as url, aiohttp.ClientSession() as session:
        spy.fail = StoreError("disk gone")
        async with session.post(url + path, json=body, headers=AUTH) as response:
            assert response.status == 500
        spy.fail = None
        _, samples = await scrape(session, url)
    assert total(samples, "scopemem_worker_store_failures_total", operation=operation) == 1
    assert total(samples, "scopemem_worker_store_operation_duration_seconds_count",
                 operation=operation) == 1


async def test_in_flight_requests_and_open_connections_are_gauged(spy):
    release = spy.hold = asyncio.Event()
    app = create_app(spy, TOKEN)
    timeout = aiohttp.ClientTimeout(total=30)
    async with running(app) as url, aiohttp.ClientSession(timeout=timeout) as writer, \
            aiohttp.ClientSession(timeout=timeout) as scraper:
        write = asyncio.ensure_future(writer.post(
            url + "/write", json={"scopeKey": ORG, "records": [candidate()]}, headers=AUTH))
        await spy.entered.wait()
        spy.hold = None  # the write waits; the scrape's read of the counters does not
        _, during = await scrape(scraper, url)
        release.set()
        async with await write as response:
            assert response.status == 200
        _, after = await scrape(scraper, url)
    # The held write and the scrape itself; then the scrape alone.
    assert total(during, "scopemem_worker_requests_in_flight") == 2
    assert total(during, "scopemem_worker_open_connections") == 2
    assert total(after, "scopemem_worker_requests_in_flight") == 1


# --- the alert rules of docs/worker.md, against a real scrape -----------------------------

def alert_rules() -> list[dict[str, Any]]:
    text = DOCS.read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(groups:.*?)```", text, re.S)
    assert block is not None, "docs/worker.md has no alerting rules block"
    rules = [rule for group in yaml.safe_load(block.group(1))["groups"]
             for rule in group["rules"]]
    assert len(rules) >= 3
    return rules


SELECTOR = re.compile(r"\b((?:scopemem|process|python)_[a-z_]+)(\{[^}]*\})?")
LABEL = re.compile(r"([a-z_]+)\s*(?:=~|!=|!~|=)")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


async def test_the_documented_alert_rules_refer_to_series_the_scrape_has(spy):
    async with running(create_app(spy, TOKEN)) as url, aiohttp.ClientSession() as session:
        body = {"scopeKey": ORG, "query": "npm", "limit": 3}
        for fail in (None, None, None, StoreError("disk gone")):
            spy.fail = fail
            async with session.post(url + "/retrieve", json=body, headers=AUTH):
                pass
        spy.fail = None
        _, samples = await scrape(session, url)
    labels_of: dict[str, set[str]] = {}
    for name, pairs in samples:
        labels_of.setdefault(name, set()).update(key for key, _ in pairs)
    for rule in alert_rules():
        assert {"alert", "expr", "for", "labels", "annotations"} <= set(rule), rule
        expr = rule["expr"]
        used = SELECTOR.findall(expr)
        assert used, rule["alert"]
        for name, matchers in used:
            assert name in labels_of, (rule["alert"], name)
            wanted = set(LABEL.findall(matchers or ""))
            for grouping in GROUPING.findall(expr):
                wanted |= {label.strip() for label in grouping.split(",")} - {"le"}
            assert wanted <= labels_of[name], (rule["alert"], name, wanted)
    # The error-rate rule's ratio, computed on the counters as the rule does on their rates:
    # one 500 in four /retrieve, one /metrics not yet counted.
    requests = "scopemem_worker_requests_total"
    errors = sum(value for (name, pairs), value in samples.items()
                 if name == requests and dict(pairs)["status"].startswith("5"))
    assert errors / total(samples, requests) == pytest.approx(1 / 4)


# --- readiness ----------------------------------------------------------------------------

async def test_readyz_reads_the_reserved_scope_and_needs_no_token(spy):
    async with running(create_app(spy, TOKEN)) as url, aiohttp.ClientSession() as session:
        async with session.get(url + "/readyz") as response:
            assert response.status == 200
            assert await response.json() == {"ok": True}
        assert spy.calls[-1] == ("list", READINESS_SCOPE, 1, None, None)
        async with session.get(url + "/healthz") as response:  # liveness: no store call
            assert await response.json() == {"ok": True}
        assert len(spy.calls) == 1


@pytest.mark.parametrize(("fail", "reason"), [
    (StoreError("cannot open /srv/secret/scopemem/org.db: disk I/O error"),
     "the store cannot serve reads"),
    (StoreBusy("postgres store: no connection free: pool of db.internal"),
     "the store is busy"),
    (RuntimeError("something nobody expected at 10.0.0.7"), "the store cannot serve reads"),
])
async def test_readyz_is_503_with_a_short_reason_when_the_store_cannot_serve(spy, fail,
                                                                            reason, caplog):
    spy.fail = fail
    async with running(create_app(spy, TOKEN)) as url, aiohttp.ClientSession() as session:
        async with session.get(url + "/readyz") as response:
            assert response.status == 503
            answer = await response.json()
        async with session.get(url + "/healthz") as response:  # still alive
            assert response.status == 200
    assert answer == {"ok": False, "error": reason}
    assert str(fail) in caplog.text  # the operator finds the cause in the log


async def test_a_scrape_still_answers_when_the_store_cannot_read_its_counters(tmp_path):
    """A SQLite directory holding a shard that cannot be opened (a full disk left one empty;
    here another application's file in its name): the counters cannot be read, but the
    scrape answers with the worker's own series, the failed ``read_counts`` among them, so
    ``ScopememStoreFailing`` can fire; it answered 500 and the target went down whole."""
    from scopemem.stores.sqlite_shared import SharedSqliteStore
    from scopemem.stores.sqlite_shared.schema import SHARDS, shard_of

    store = SharedSqliteStore(tmp_path / "data", synchronous="off")
    await store.write(ORG, [fact("run npm ci before the license check")])
    bad = (shard_of(ORG) + 1) % SHARDS
    (tmp_path / "data" / f"shard-{bad:03d}-of-{SHARDS:03d}.db").write_bytes(b"x" * 4096)
    async with running(create_app(store, TOKEN)) as url, aiohttp.ClientSession() as session:
        async with session.post(url + "/list", json={"scopeKey": ORG, "limit": 5},
                                headers=AUTH) as response:
            assert response.status == 200  # the scope's own shard still serves
        text, samples = await scrape(session, url)
    assert total(samples, "scopemem_worker_store_failures_total",
                 operation="read_counts") == 1
    assert "scopemem_memory_events_total" not in text
    assert total(samples, "scopemem_worker_requests_total", route="/list") == 1

