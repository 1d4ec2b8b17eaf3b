"""``scopemem serve`` as an operator runs it: a subprocess on a port the system picks,
stopped by a signal."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from click.testing import CliRunner

from scopemem.cli import build_cli
from scopemem.core.records import WriteCounts
from scopemem.stores.worker import WorkerStore
from tests.conftest import fact

TOKEN = "serve-token-0123456789"
ORG = "org:acme"


@pytest.fixture
def serve_in_process():
    """``serve`` run in this process puts its repeat filter on the root logger's handlers,
    pytest's capture handlers among them; they are given back as they were, so no later
    test's warnings are held back."""
    import logging

    handlers = list(logging.getLogger().handlers)
    filters = {handler: list(handler.filters) for handler in handlers}
    yield
    for handler in handlers:
        handler.filters[:] = filters[handler]


def launch(tmp_path: Path, *args: str, token: str | None = TOKEN) -> subprocess.Popen:
    """``scopemem serve`` on a port the system picks (``--port 0``): never one another
    process took between a test choosing it and the server binding it."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("SCOPEMEM_CONFIG", "SCOPEMEM_TOKEN")}
    if token is not None:
        env["SCOPEMEM_TOKEN"] = token
    return subprocess.Popen(
        [sys.executable, "-m", "scopemem", "serve", "--port", "0", *args],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def listening(process: subprocess.Popen) -> tuple[str, str]:
    """The URL a ``serve`` process listens on, and the line it said so in (its first)."""
    assert process.stdout is not None
    banner = process.stdout.readline()
    assert "listening on http://" in banner, (banner, process.poll())
    return banner.split("listening on ", 1)[1].split()[0], banner


def start(tmp_path: Path, *args: str, token: str | None = TOKEN) -> tuple[subprocess.Popen, str]:
    """``launch``, then the URL it listens on, once it does."""
    process = launch(tmp_path, *args, token=token)
    return process, listening(process)[0]


async def wait_healthy(process: subprocess.Popen, url: str) -> None:
    deadline = time.monotonic() + 20
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()
            try:
                async with session.get(url + "/healthz") as response:
                    if response.status == 200 and await response.json() == {"ok": True}:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError("the worker never became healthy")


def stop(process: subprocess.Popen, signum: int) -> tuple[str, str]:
    process.send_signal(signum)
    try:
        out, err = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    assert process.returncode == 0, (out, err)
    return out, err


async def test_serve_write_list_restart_and_stop(tmp_path):
    data = tmp_path / "data"
    process = launch(tmp_path, "--data", str(data), "--no-access-log")
    url, banner = listening(process)
    try:
        await wait_healthy(process, url)
        store = WorkerStore(url, TOKEN)
        try:
            assert await store.write(ORG, [fact("run npm ci first")]) == WriteCounts(inserted=1)
            assert [r.text for r in await store.list(ORG, 5)] == ["run npm ci first"]
        finally:
            await store.close()
    finally:
        out, err = stop(process, signal.SIGINT)
    assert banner == f"scopemem worker listening on {url} (store: sqlite)\n"
    assert "stopped" in out
    assert "Traceback" not in err
    assert list(data.glob("*.db"))  # the default store is the embedded SQLite one

    # A new process on the same data directory still has the record (SIGTERM this time).
    process, url = start(tmp_path, "--data", str(data))
    try:
        await wait_healthy(process, url)
        store = WorkerStore(url, TOKEN)
        try:
            assert [r.text for r in await store.list(ORG, 5)] == ["run npm ci first"]
        finally:
            await store.close()
    finally:
        out, err = stop(process, signal.SIGTERM)
    assert "[list] org:acme -> 1" in err and "run npm ci" not in err
    assert "POST /list" in err  # the access log is on by default


@pytest.mark.parametrize("token", [None, "", "x", "fifteen-chars-x"])
def test_serve_refuses_to_start_without_a_long_token(tmp_path, token):
    process = launch(tmp_path, "--store", "memory", token=token)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 1
    assert "SCOPEMEM_TOKEN" in err
    assert ("at least 16 are needed" in err) if token else ("is not set" in err)
    assert "--insecure-dev" in err and "Traceback" not in err


@pytest.mark.parametrize(("tokens", "says"), [
    ({"SCOPEMEM_METRICS_TOKEN": "one-secret-for-both-0123",
      "SCOPEMEM_HUB_TOKEN": "one-secret-for-both-0123"},
     "SCOPEMEM_HUB_TOKEN must differ from SCOPEMEM_METRICS_TOKEN"),
    ({"SCOPEMEM_METRICS_TOKEN": TOKEN}, "SCOPEMEM_METRICS_TOKEN must differ from the data token"),
])
def test_serve_refuses_a_metrics_token_shared_with_another(tmp_path, monkeypatch, tokens, says):
    """The metrics token opens /metrics and nothing else: the scraper holding it must hold
    neither the data token nor a hub login, whose session changes records."""
    for name, value in tokens.items():
        monkeypatch.setenv(name, value)
    process = launch(tmp_path, "--store", "memory")
    try:
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 1, (out, err)
    assert says in err


@pytest.mark.parametrize(("tokens", "failed"), [
    ({"SCOPEMEM_TOKEN": "a token with spaces 0123"}, "SCOPEMEM_TOKEN"),
    ({"SCOPEMEM_TOKEN": TOKEN, "SCOPEMEM_METRICS_TOKEN": "métrics-token-0123456"},
     "SCOPEMEM_METRICS_TOKEN"),
])
def test_serve_names_the_token_that_fails_the_format_check(tmp_path, monkeypatch, tokens,
                                                           failed, serve_in_process):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SCOPEMEM_CONFIG", raising=False)
    monkeypatch.delenv("SCOPEMEM_METRICS_TOKEN", raising=False)
    for name, value in tokens.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(build_cli(), ["serve", "--store", "memory", "--port", "0"])
    assert result.exit_code == 1, result.output
    assert f"Error: {failed} must be printable ASCII without spaces" in result.output
    assert "SCOPEMEM_TOKEN or" not in result.output


BLOCK_PSYCOPG = ("import sys; sys.modules['psycopg'] = None;"
                 " sys.modules['psycopg_pool'] = None; from scopemem.cli import main; main()")


@pytest.mark.parametrize("installed", [False, True])
async def test_a_postgres_worker_without_psycopg_stops_at_start_a_down_server_does_not(
        tmp_path, installed):
    """Without its library every request would fail: ``serve`` stops with one line naming
    the package and the pip command. A server that is merely down (nothing listens on port
    1) is waited for: the worker starts and says it listens."""
    config = tmp_path / "pg.toml"
    config.write_text('[memory.stores.postgres]\ndsn = "postgresql://postgres@127.0.0.1:1/x"\n')
    env = {**{key: value for key, value in os.environ.items() if key != "SCOPEMEM_CONFIG"},
           "SCOPEMEM_TOKEN": TOKEN}
    command = ["-m", "scopemem"] if installed else ["-c", BLOCK_PSYCOPG]
    process = subprocess.Popen(
        [sys.executable, *command, "--config", str(config), "serve", "--store", "postgres",
         "--port", "0"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    if installed:
        listening(process)
        stop(process, signal.SIGTERM)
        return
    try:
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 1 and out == "", (out, err)
    assert err == ("Error: postgres store: psycopg is not installed (pip install -e"
                   " '.[postgres]' from the scopemem checkout)\n")


async def test_insecure_dev_starts_without_a_token_warns_and_refuses_every_data_route(
        tmp_path):
    process = launch(tmp_path, "--store", "memory", "--insecure-dev", token=None)
    url, banner = listening(process)
    try:
        await wait_healthy(process, url)
        async with aiohttp.ClientSession() as session, session.post(
                url + "/list", json={"scopeKey": ORG, "limit": 1},
                headers={"Authorization": "Bearer "}) as response:
            assert response.status == 401
            # No version banner on any answer.
            assert response.headers["Server"] == "scopemem"
    finally:
        out, err = stop(process, signal.SIGINT)
    assert "INSECURE: SCOPEMEM_TOKEN is not set" in err
    assert "every data route will answer 401" in err
    assert "(store: memory)" in banner and "stopped" in out


def test_an_unknown_store_is_a_clear_error(tmp_path, monkeypatch, serve_in_process):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SCOPEMEM_CONFIG", raising=False)
    result = CliRunner().invoke(build_cli(), ["serve", "--store", "cassandra"])
    assert result.exit_code == 1
    assert "store 'cassandra' is not installed; installed:" in result.output
    assert "sqlite" in result.output and "Traceback" not in result.output


def test_several_processes_over_the_in_process_store_are_refused(tmp_path, monkeypatch,
                                                                  serve_in_process):
    """Each process of ``--workers N`` over the memory store would keep records of its own:
    a write answered by one is missing from the others, and both give out the same ids for
    different records (a forget by id could hit another record). It is a usage error naming
    the store, before anything forks or listens."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SCOPEMEM_CONFIG", raising=False)
    monkeypatch.setenv("SCOPEMEM_TOKEN", TOKEN)
    result = CliRunner().invoke(build_cli(), ["serve", "--store", "memory", "--workers", "2",
                                              "--port", "0"])
    assert result.exit_code == 2, result.output
    assert "--workers 2: the memory store keeps records in each process" in result.output
    assert "Traceback" not in result.output


def test_serve_uses_the_configured_store_even_with_memory_disabled(tmp_path, monkeypatch,
                                                                   serve_in_process):
    config = tmp_path / "scopemem.toml"
    config.write_text('[memory]\nenabled = false\nstore = "nosuch"\n')
    monkeypatch.delenv("SCOPEMEM_CONFIG", raising=False)
    result = CliRunner().invoke(build_cli(), ["--config", str(config), "serve"])
    assert result.exit_code == 1 and "store 'nosuch' is not installed" in result.output
