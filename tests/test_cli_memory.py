"""The memory commands on the command line, through click's CliRunner, against the SQLite
store and against a live Memory Worker (``scopemem serve`` in a subprocess)."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from scopemem.cli import build_cli
from scopemem.plugins.manager import new_plugin_manager
from tests.worker.test_serve import start, stop, wait_healthy

ADMIN = "user:cli:local"
STATUS = "PR 1835 was pushed at sha 3f9a2c1 with all 10512 tests passing"


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("worker")
    process, url = start(directory, "--data", str(directory / "data"), "--no-access-log",
                         token="cli-token")
    try:
        asyncio.run(wait_healthy(process, url))
        yield url
    finally:
        stop(process, signal.SIGTERM)


@pytest.fixture(params=["sqlite", "worker"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / "scopemem.toml"
    common = f'[memory]\nenabled = true\norganization = "acme"\nadmins = ["{ADMIN}"]\n'
    if request.param == "sqlite":
        path.write_text(common + f'store = "sqlite"\n[memory.stores.sqlite]\n'
                                 f'path = "{tmp_path / "data"}"\n')
    else:
        url = request.getfixturevalue("worker")
        # Each test gets its own organisation on the shared worker.
        org = f"acme{tmp_path.name.replace('_', '').replace('-', '')}"
        path.write_text(common.replace('"acme"', f'"{org}"') + 'store = "worker"\n'
                        f'[memory.stores.worker]\nbase_url = "{url}"\n')
    return path


def run(config: Path, *args: str) -> Result:
    cli = build_cli(new_plugin_manager(environ={}))
    return CliRunner().invoke(cli, ["--config", str(config), *args],
                              env={"MEMORY_TOKEN": "cli-token"})


def org_of(config: Path) -> str:
    return "org:" + config.read_text().split('organization = "', 1)[1].split('"', 1)[0]


def test_remember_list_context_forget(config: Path):
    org = org_of(config)
    result = run(config, "remember", "integration tests need make bootstrap", "--scope", "org")
    assert result.exit_code == 0, result.output
    assert f"remembered in {org}" in result.output

    listed = run(config, "list", "org", "bootstrap", "--json")
    assert listed.exit_code == 0, listed.output
    [section] = json.loads(listed.output)["scopes"]
    assert section["scopeKey"] == org
    assert [r["text"] for r in section["records"]] == ["integration tests need make bootstrap"]
    record_id = section["records"][0]["id"]
    assert record_id == f"mem:{org}:1"

    context = run(config, "context", "why do integration tests fail", "--user", "slack:U1")
    assert context.exit_code == 0
    assert f"Background memory for {org} + user:slack:U1" in context.output
    assert "- integration tests need make bootstrap (source: cli:remember)" in context.output

    assert run(config, "forget", record_id).exit_code == 0
    again = run(config, "forget", record_id)
    assert again.exit_code == 1 and "Nothing to forget" in again.output
    assert "no active records" in run(config, "list", "--scope", "org").output
    nothing = run(config, "context", "why do integration tests fail")
    assert "nothing matched" in nothing.output


def test_the_gate_refuses_status_and_other_peoples_scopes(config: Path):
    refused = run(config, "remember", STATUS, "--scope", "org")
    assert refused.exit_code == 1 and "one-moment status" in refused.output
    mine = run(config, "remember", "this user prefers tabs", "--scope", "me",
               "--as", "user:slack:U7")
    assert mine.exit_code == 0
    for caller in ("user:slack:U8", ADMIN):
        other = run(config, "forget", "mem:user:slack:U7:1", "--as", caller)
        assert other.exit_code == 1 and "another person" in other.output
    not_admin = run(config, "remember", "lint before pushing", "--scope", "org",
                    "--as", "user:slack:U8")
    assert not_admin.exit_code == 1 and "only admins" in not_admin.output
    listed = run(config, "list", "me", "--as", "user:slack:U7", "--json")
    assert [r["text"] for r in json.loads(listed.output)["scopes"][0]["records"]] == [
        "this user prefers tabs"]


def test_sweep_dry_run_then_real(config: Path, tmp_path: Path):
    org = org_of(config)
    # A status line stored before the gate existed: write it below the gate, to the store.
    from scopemem.memory import Memory

    async def plant() -> None:
        memory = Memory.from_config(config, environ={"MEMORY_TOKEN": "cli-token"})
        from scopemem.core.records import Candidate, Kind

        await memory.store.write(org, [Candidate(kind=Kind.FACT, text=STATUS,
                                                 source_thread_key="old")])
        await memory.close()

    asyncio.run(plant())
    assert run(config, "remember", "run npm ci first", "--scope", "org").exit_code == 0
    dry = run(config, "sweep", "--scope", "org", "--dry-run", "--json")
    assert dry.exit_code == 0
    assert json.loads(dry.output)["scopes"] == [{"scopeKey": org, "swept": 1,
                                                 "ids": [f"mem:{org}:1"]}]
    real = run(config, "sweep", "--scope", "org")
    assert real.exit_code == 0 and f"{org}: swept 1" in real.output
    left = json.loads(run(config, "list", "org", "--json").output)["scopes"][0]["records"]
    assert [r["text"] for r in left] == ["run npm ci first"]
    refused = run(config, "sweep", "--scope", "org", "--as", "user:slack:U8")
    assert refused.exit_code == 1


def test_usage_errors_are_click_errors(config: Path):
    for args in (["list", "--limit", "51"], ["list", "--scope", "everyone"],
                 ["sweep", "--scope", "me"], ["forget"], ["list", "--as", "slack:U1"]):
        result = run(config, *args)
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output
    bad_id = run(config, "forget", "not-an-id")
    assert bad_id.exit_code == 1 and "mem:<scope>:<number>" in bad_id.output


def test_memory_off_says_so(tmp_path: Path):
    path = tmp_path / "scopemem.toml"
    path.write_text("[memory]\nenabled = false\n")
    listed = run(path, "list")
    assert listed.exit_code == 1 and "memory is off" in listed.output
    context = run(path, "context", "anything")
    assert context.exit_code == 0 and "memory is off" in context.output
