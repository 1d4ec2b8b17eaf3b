"""``scopemem health``: the readiness check and what needs a person, one line each, against
a real SQLite directory, an unreachable worker and the in-process fallback."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from scopemem.cli import build_cli
from scopemem.config import load_config
from scopemem.core.counters import day_of
from scopemem.core.records import CountRow
from scopemem.installation import build_store
from scopemem.plugins.manager import new_plugin_manager
from scopemem.stores import health as checks
from scopemem.stores.base import wall_clock_ms
from tests.conftest import fact
from tests.worker.test_serve import TOKEN, start, stop, wait_healthy

APP, API = "repo:acme/app", "repo:acme/api"


def health(config: Path, *args: str) -> Result:
    pm = new_plugin_manager(environ={})
    return CliRunner().invoke(build_cli(pm), ["--config", str(config), "health", *args])


def by_name(result: Result) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in json.loads(result.output)}


@pytest.fixture
def roomy(monkeypatch):
    """Any free space is enough (the machine running the tests may be nearly full)."""
    monkeypatch.setattr(checks, "WARN_FREE_BYTES", 0)
    monkeypatch.setattr(checks, "WARN_FREE_SHARE", 0)
    monkeypatch.setattr(checks, "FAIL_FREE_BYTES", 0)
    monkeypatch.setattr(checks, "FAIL_FREE_SHARE", 0)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "scopemem.toml"
    path.write_text('[memory]\nenabled = true\norganization = "acme"\nstore = "sqlite"\n'
                    'max_records_per_scope = 10\n'
                    f'[memory.stores.sqlite]\npath = "{tmp_path / "data"}"\n')
    return path


def fill(config: Path, failed_reflections: int = 0) -> None:
    async def run() -> None:
        store = build_store(load_config(config), new_plugin_manager(environ={}))
        try:
            await store.write(APP, [fact(f"step {n} of the release is documented in RELEASE")
                                    for n in range(9)])
            await store.write(API, [fact("run tox -e lint before pushing")])
            if failed_reflections:
                await store.add_counts([CountRow(API, day_of(wall_clock_ms()),
                                                 "reflections_failed", failed_reflections)])
        finally:
            await store.close()

    asyncio.run(run())


def test_a_healthy_store_is_ok_and_a_scope_near_its_cap_warns(config, roomy):
    fill(config)
    result = health(config, "--json")
    assert result.exit_code == 1, result.output  # one scope is near the cap
    found = by_name(result)
    assert found["store"] == {"name": "store", "status": "ok", "detail": "answers reads"}
    assert found["durable"]["status"] == "ok"
    assert found["disk"]["status"] == "ok"
    assert found["reflections"]["status"] == "ok"
    assert found["scopes"]["status"] == "warn"
    assert APP in found["scopes"]["detail"] and API not in found["scopes"]["detail"]
    text = health(config)
    assert text.exit_code == 1
    assert "warn scopes: 1 scopes hold 90% or more of the cap (10)" in text.output
    assert "ok   store: answers reads" in text.output


def test_failed_reflections_and_a_full_disk_need_a_person(config, monkeypatch):
    fill(config, failed_reflections=3)

    class Usage:
        total, used, free = 100 << 30, (100 << 30) - (50 << 20), 50 << 20

    monkeypatch.setattr(checks.shutil, "disk_usage", lambda _path: Usage)
    result = health(config, "--json")
    assert result.exit_code == 2, result.output
    found = by_name(result)
    assert found["disk"]["status"] == "fail"
    assert found["reflections"] == {"name": "reflections", "status": "warn",
                                    "detail": "3 reflections failed in the last 7 days"
                                              " (scopemem stats)"}


def test_a_store_that_cannot_serve_fails(tmp_path, monkeypatch):
    path = tmp_path / "scopemem.toml"
    path.write_text('[memory]\nenabled = true\norganization = "acme"\nstore = "worker"\n'
                    '[memory.stores.worker]\nbase_url = "http://127.0.0.1:1"\n'
                    'timeout_seconds = 2\n')
    monkeypatch.setenv("MEMORY_TOKEN", "a-token-long-enough-0123")
    result = health(path)
    assert result.exit_code == 2, result.output
    assert result.output.splitlines()[0] == "fail store: the store cannot serve reads"


def test_the_in_process_fallback_is_a_warning(tmp_path, monkeypatch):
    path = tmp_path / "scopemem.toml"
    path.write_text('[memory]\nenabled = true\norganization = "acme"\nstore = "worker"\n'
                    '[memory.stores.worker]\nbase_url = "http://127.0.0.1:1"\n')
    monkeypatch.delenv("MEMORY_TOKEN", raising=False)
    result = health(path, "--json")
    assert result.exit_code == 1, result.output
    found = by_name(result)
    assert found["store"]["status"] == "ok"
    assert found["durable"]["status"] == "warn"
    assert "fell back to the in-process store" in found["durable"]["detail"]


def test_a_scope_near_its_cap_is_found_over_a_live_worker(tmp_path, monkeypatch):
    """The scopes check reads the worker's pages of scopes (a count each): over a worker it
    warns as over the store itself, where reading each scope's records hit the worker's
    limit of 50 a listing and failed."""
    process, url = start(tmp_path, "--data", str(tmp_path / "data"), "--no-access-log")
    try:
        asyncio.run(wait_healthy(process, url))
        path = tmp_path / "scopemem.toml"
        path.write_text('[memory]\nenabled = true\norganization = "acme"\nstore = "worker"\n'
                        'max_records_per_scope = 60\n'
                        f'[memory.stores.worker]\nbase_url = "{url}"\n')
        monkeypatch.setenv("MEMORY_TOKEN", TOKEN)

        async def fill_over_the_worker() -> None:
            store = build_store(load_config(path), new_plugin_manager(environ={}))
            try:
                for start_at in (0, 30):  # at most 50 records a write
                    await store.write(APP, [fact(f"step {n} of the release is in RELEASE.md")
                                            for n in range(start_at, start_at + 28)], cap=60)
                await store.write(API, [fact("run tox -e lint before pushing")], cap=60)
            finally:
                await store.close()

        asyncio.run(fill_over_the_worker())
        result = health(path, "--json")
    finally:
        stop(process, signal.SIGTERM)
    found = by_name(result)
    assert found["store"]["status"] == "ok", result.output
    assert found["scopes"]["status"] == "warn", result.output
    assert APP in found["scopes"]["detail"] and API not in found["scopes"]["detail"]


def test_over_a_worker_the_store_check_is_the_workers_own_readiness(tmp_path, monkeypatch):
    """A worker whose data directory was moved away refuses writes and answers /readyz 503,
    while its open connections still read: ``health`` on a bot's machine asked only for a
    read, and said "ok" while every write failed."""
    import os

    data = tmp_path / "data"
    process, url = start(tmp_path, "--data", str(data), "--no-access-log")
    path = tmp_path / "scopemem.toml"
    path.write_text('[memory]\nenabled = true\norganization = "acme"\nstore = "worker"\n'
                    f'[memory.stores.worker]\nbase_url = "{url}"\n')
    monkeypatch.setenv("MEMORY_TOKEN", TOKEN)
    try:
        asyncio.run(wait_healthy(process, url))

        async def write_one() -> None:
            store = build_store(load_config(path), new_plugin_manager(environ={}))
            try:
                await store.write(APP, [fact("run make bootstrap before the tests")])
            finally:
                await store.close()

        asyncio.run(write_one())
        assert by_name(health(path, "--json"))["store"]["status"] == "ok"
        os.rename(data, tmp_path / "aside")
        result = health(path, "--json")
    finally:
        stop(process, signal.SIGTERM)
    assert result.exit_code == 2, result.output
    assert by_name(result)["store"] == {
        "name": "store", "status": "fail",
        "detail": "the memory worker's store: the store cannot serve reads"}


def test_over_a_worker_a_token_it_refuses_fails_the_store_check(tmp_path, monkeypatch):
    """``/readyz`` takes no token: ``health`` with a wrong ``MEMORY_TOKEN`` said the store
    answers reads, where the worker refused every read and write of this client."""
    process, url = start(tmp_path, "--data", str(tmp_path / "data"), "--no-access-log")
    path = tmp_path / "scopemem.toml"
    path.write_text('[memory]\nenabled = true\norganization = "acme"\nstore = "worker"\n'
                    f'[memory.stores.worker]\nbase_url = "{url}"\n')
    monkeypatch.setenv("MEMORY_TOKEN", "not-the-worker-token-0123")
    try:
        asyncio.run(wait_healthy(process, url))
        result = health(path, "--json")
    finally:
        stop(process, signal.SIGTERM)
    assert result.exit_code == 2, result.output
    assert by_name(result)["store"]["status"] == "fail", result.output


def test_the_null_store_is_not_called_durable(tmp_path):
    path = tmp_path / "scopemem.toml"
    path.write_text('[memory]\nenabled = true\norganization = "acme"\nstore = "null"\n')
    found = by_name(health(path, "--json"))
    assert found["durable"] == {"name": "durable", "status": "warn",
                                "detail": "the null store keeps no records: memory holds"
                                          " nothing"}


def test_memory_off_checks_no_store_and_says_so_with_a_warning(tmp_path):
    """A worker's configuration needs no ``memory.enabled`` (docs/worker.md), but without it
    ``health`` builds no store: a cron job running it must not read that as healthy."""
    path = tmp_path / "scopemem.toml"
    path.write_text(f'[memory]\nstore = "sqlite"\n[memory.stores.sqlite]\n'
                    f'path = "{tmp_path / "data"}"\n')
    result = health(path, "--json")
    assert result.exit_code == 1, result.output
    detail = by_name(result)["memory"]["detail"]
    assert "no store was checked" in detail and "memory.enabled = true" in detail


async def test_a_plugin_store_keeping_records_in_process_says_so_not_a_fallback():
    """A third-party store that sets ``durable = False`` (docs/plugins.md) keeps its records
    in the process; it did not fall back from anything, and has no token to be missing."""
    from scopemem.stores.memory import InMemoryStore

    class Cache(InMemoryStore):
        pass

    found = {check.name: check for check in await checks.check_store(
        Cache(), configured="cache", cap=500)}
    assert found["durable"].status == "warn"
    assert found["durable"].detail == ("the cache store keeps records in the process: they "
                                       "are lost when it exits")
    fallback = {check.name: check for check in await checks.check_store(
        InMemoryStore(), configured="worker", cap=500)}
    assert "fell back to the in-process store" in fallback["durable"].detail


def test_a_shard_that_cannot_be_read_fails_the_check_instead_of_the_command(config, roomy):
    """A shard the store cannot open (here another application's file in its name; on a
    full disk, one created empty) fails the checks that read it, with exit 2 and every
    other line still printed, where ``health`` stopped with one error line and exit 1,
    which a monitor reads as a warning."""
    from scopemem.core.scopes import READINESS_SCOPE
    from scopemem.stores.sqlite_shared.schema import SHARDS, shard_of

    fill(config)
    data = config.parent / "data"
    bad = next(index for index in range(SHARDS) if index != shard_of(READINESS_SCOPE)
               and index not in (shard_of(APP), shard_of(API)))
    (data / f"shard-{bad:03d}-of-{SHARDS:03d}.db").write_bytes(b"not a database" * 100)
    result = health(config, "--json")
    assert result.exit_code == 2, result.output
    found = by_name(result)
    assert found["store"]["status"] == "ok"
    assert found["disk"]["status"] == "ok"
    assert found["scopes"]["status"] == "fail"
    assert f"shard-{bad:03d}-of-{SHARDS:03d}.db" in found["scopes"]["detail"]
    text = health(config)
    assert text.exit_code == 2
    assert "fail scopes: cannot read the scopes' counts: " in text.output
    assert "ok   disk: " in text.output


async def test_a_check_an_older_worker_cannot_answer_is_a_warning():
    """A worker of 0.1.0 serves no pages of scopes: the store answers reads, so the check it
    cannot make is a warning naming why (exit 1), not a failure that pages someone."""
    from scopemem.errors import StoreUnsupported
    from scopemem.stores.memory import InMemoryStore

    store = InMemoryStore()

    async def scope_page(**_kwargs: Any) -> Any:
        raise StoreUnsupported("memory worker /scope-page failed: answered 404: not found;"
                               " this worker serves no /scope-page")

    store.scope_page = scope_page  # type: ignore[method-assign]
    found = {c.name: c for c in await checks.check_store(store, configured="worker", cap=500)}
    assert found["scopes"] == checks.Check(
        "scopes", checks.WARN, "cannot read the scopes' counts: memory worker /scope-page"
        " failed: answered 404: not found; this worker serves no /scope-page")
    assert found["store"].status == checks.OK
