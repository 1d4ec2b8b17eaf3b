"""The worker serves counters: /counts adds, /stats reads, /metrics exposes them to
Prometheus; every one behind a bearer, bad input a 400 with a reason, a store without
counters a 501. Against a live server on loopback."""

from __future__ import annotations

import random
import string
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scopemem.core.counters import DAY_MS, day_of
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.sqlite_shared.store import SharedSqliteStore
from scopemem.worker_aiohttp.app import create_app
from tests.conftest import START_MS, FakeClock, fact
from tests.worker.conftest import AUTH, ORG, TOKEN

REPO = "repo:acme/app"
TODAY = day_of(START_MS)
METRICS_TOKEN = "metrics-only-token-1234"


def row(scope: str = ORG, name: str = "offered", value: int = 1, day: int = TODAY
        ) -> dict[str, Any]:
    return {"scopeKey": scope, "day": day, "name": name, "value": value}


@pytest.fixture
def backing(clock: FakeClock) -> InMemoryStore:
    return InMemoryStore(clock=clock)


@pytest.fixture
async def served(aiohttp_client, backing: InMemoryStore):
    return await aiohttp_client(create_app(backing, TOKEN, metrics_token=METRICS_TOKEN))


async def test_counts_then_stats_read_them_back(served, backing):
    await backing.write(REPO, [fact("make bootstrap before pytest")])
    response = await served.post("/counts", json={"counts": [
        row(), row(), row(name="rejected:commit_sha"), row(REPO, "injected_window", 4)]},
        headers=AUTH)
    assert response.status == 200 and await response.json() == {"ok": True, "added": 4}
    response = await served.post("/stats", json={"since": 0}, headers=AUTH)
    assert response.status == 200
    answer = await response.json()
    assert answer["truncated"] is False
    assert answer["rows"] == [row(name="offered", value=2), row(name="rejected:commit_sha"),
                              row(REPO, "injected_window", 4), row(REPO, "inserted")]
    repo_only = await (await served.post("/stats", json={"prefix": "repo:", "since": 0},
                                         headers=AUTH)).json()
    assert {r["scopeKey"] for r in repo_only["rows"]} == {REPO}
    later = await (await served.post("/stats", json={"scopeKey": ORG,
                                                     "since": (TODAY + 1) * DAY_MS},
                                     headers=AUTH)).json()
    assert later["rows"] == []


@pytest.mark.parametrize("path, body, reason", [
    ("/counts", {}, "counts is required"),
    ("/counts", {"counts": "offered"}, "counts must be a list"),
    ("/counts", {"counts": [row(name="anything")]}, "counts[0].name: unknown counter"),
    ("/counts", {"counts": [row(value=0)]}, "counts[0].value must be an integer"),
    ("/counts", {"counts": [row(value=True)]}, "counts[0].value must be an integer"),
    ("/counts", {"counts": [row(day=-1)]}, "counts[0].day must be an integer"),
    ("/counts", {"counts": [row(scope="org:a b")]}, "counts[0].scopeKey"),
    ("/counts", {"counts": [row()] * 513}, "at most 512"),
    ("/stats", {}, "since is required"),
    ("/stats", {"since": "yesterday"}, "since must be an integer"),
    ("/stats", {"since": 0, "scopeKey": ORG, "scopeKeys": [ORG]}, "not both"),
    ("/stats", {"since": 0, "scopeKeys": [ORG, 7]}, "scopeKeys[1]"),
    ("/stats", {"since": 0, "prefix": "repo:\n"}, "prefix"),
])
async def test_bad_bodies_are_400_with_a_reason_and_change_nothing(served, backing, path,
                                                                  body, reason):
    response = await served.post(path, json=body, headers=AUTH)
    assert response.status == 400
    assert reason in (await response.json())["error"]
    assert await backing.read_counts() == []


@pytest.mark.parametrize("path", ["/counts", "/stats"])
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"},
                                     {"Authorization": f"Bearer {METRICS_TOKEN}"}])
async def test_data_routes_need_the_data_token(served, backing, path, headers):
    response = await served.post(path, json={"counts": [row()], "since": 0}, headers=headers)
    assert response.status == 401
    assert await backing.read_counts() == []


async def test_metrics_are_prometheus_text_per_kind_and_counter(served, backing):
    await backing.write(REPO, [fact("make bootstrap before pytest"),
                               fact("node 20 is pinned in .nvmrc")])
    await backing.write("repo:acme/api", [fact("run tox -e lint before pushing")])
    await backing.add_counts([_row(ORG, "offered", 5), _row(ORG, "rejected", 2),
                              _row(ORG, "rejected:commit_sha", 2)])
    for token in (TOKEN, METRICS_TOKEN):
        response = await served.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(text)
                   for s in family.samples}
        assert samples[("scopemem_memory_events_total",
                        (("counter", "inserted"), ("kind", "repo")))] == 3
        assert samples[("scopemem_memory_events_total",
                        (("counter", "offered"), ("kind", "org")))] == 5
        assert samples[("scopemem_memory_rejected_total",
                        (("kind", "org"), ("marker", "commit_sha")))] == 2
        assert samples[("scopemem_memory_scopes", (("kind", "repo"),))] == 2
        # No label names a scope: the series stay bounded however many scopes there are.
        assert "acme/app" not in text


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}])
async def test_metrics_need_a_token(served, headers):
    response = await served.get("/metrics", headers=headers)
    assert response.status == 401
    assert "bearer" in (await response.json())["error"]


class _NoCounters:
    """A third-party store with only the MemoryStore methods."""

    def __init__(self, clock: FakeClock) -> None:
        self.inner = InMemoryStore(clock=clock)

    def __getattr__(self, name: str) -> Any:
        if name in ("add_counts", "read_counts"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def close(self) -> None:
        await self.inner.close()


async def test_a_store_without_counters_is_501_on_its_counter_routes(aiohttp_client, clock):
    """/counts and /stats cannot be served; /metrics still serves the requests and the
    process, without the memory series."""
    client = await aiohttp_client(create_app(_NoCounters(clock), TOKEN))
    for method, path, body in (("post", "/counts", {"counts": [row()]}),
                               ("post", "/stats", {"since": 0})):
        response = await client.request(method, path, json=body, headers=AUTH)
        assert response.status == 501, path
        assert "keeps no counters" in (await response.json())["error"]
    response = await client.get("/metrics", headers=AUTH)
    assert response.status == 200
    names = {family.name for family in text_string_to_metric_families(await response.text())}
    assert "scopemem_worker_requests" in names
    assert not any(name.startswith("scopemem_memory_") for name in names)


def _row(scope: str, name: str, value: int) -> Any:
    from scopemem.core.records import CountRow

    return CountRow(scope, TODAY, name, value)


async def test_invented_kinds_and_markers_keep_the_scrape_bounded(served, backing):
    """Labels come from the registered kinds and the gate's markers; anything a client
    invents is summed under ``other``, so no number of requests grows the scrape."""
    chance = random.Random(33)

    def word() -> str:
        return "".join(chance.choice(string.ascii_lowercase) for _ in range(12))

    async def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        response = await served.get("/metrics", headers=AUTH)
        assert response.status == 200
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(await response.text())
                for s in family.samples if s.name.startswith("scopemem_memory_")}

    await served.post("/counts", json={"counts": [row(), row(name="rejected:commit_sha")]},
                      headers=AUTH)
    before = await scrape()
    for _ in range(40):
        rows = [row(f"{word()}:{word()}", chance.choice(("offered", f"rejected:{word()}")))
                for _ in range(100)]
        response = await served.post("/counts", json={"counts": rows}, headers=AUTH)
        assert response.status == 200
    after = await scrape()
    assert len(after) - len(before) <= 4  # the "other" kind's and marker's series
    values = {label for key in after for name, label in key[1]}
    assert values <= {"org", "repo", "channel", "user", "other", "offered",
                      "commit_sha", "rejected"}
    assert after[("scopemem_memory_rejected_total", (("kind", "other"), ("marker", "other")))
                 ] == sum(1 for r in await backing.read_counts()
                          if r.name.startswith("rejected:") and r.scope_key != ORG)
    assert after[("scopemem_memory_scopes", (("kind", "other"),))] == 4000
    # The rows themselves keep their names: /stats reads a scope's markers one by one.
    assert len(await backing.read_counts()) == 4002


async def test_a_plugin_kind_is_labelled_when_registered(aiohttp_client, backing):
    client = await aiohttp_client(create_app(backing, TOKEN, scope_kinds=("org", "team")))
    await client.post("/counts", json={"counts": [row("team:core"), row(REPO)]}, headers=AUTH)
    text = await (await client.get("/metrics", headers=AUTH)).text()
    assert 'scopemem_memory_scopes{kind="team"} 1.0' in text
    assert 'scopemem_memory_scopes{kind="other"} 1.0' in text  # repo is not registered here


async def test_counts_for_a_new_scope_past_max_scopes_are_507(aiohttp_client, tmp_path, clock):
    store = SharedSqliteStore(tmp_path / "data", clock=clock, synchronous="off", max_scopes=2)
    client = await aiohttp_client(create_app(store, TOKEN))
    response = await client.post("/counts", json={"counts": [row(), row(REPO)]}, headers=AUTH)
    assert response.status == 200
    response = await client.post("/counts", json={"counts": [row("made-up:1")]}, headers=AUTH)
    assert response.status == 507
    assert "limit on scopes" in (await response.json())["error"]
    assert {r.scope_key for r in await store.read_counts()} == {ORG, REPO}


async def test_the_salience_rules_marker_is_labelled_by_its_name(served):
    """Noise dropped before storage counts as ``rejected:noise``: a marker of the project's
    own, labelled by name like the gate's, not folded into ``other``."""
    await served.post("/counts", json={"counts": [row(name="rejected:noise")]}, headers=AUTH)
    text = await (await served.get("/metrics", headers=AUTH)).text()
    assert 'marker="noise"' in text and 'marker="other"' not in text
