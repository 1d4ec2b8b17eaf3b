"""``scopemem forget-person`` and ``scopemem purge`` through click's CliRunner, on a real
SQLite data directory, a real PostgreSQL schema and a live Memory Worker."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from scopemem.core.records import Status
from tests.cli.test_memory_commands import worker, worker_config  # noqa: F401 - the fixture
from tests.cli.test_porting import ADMIN, line, ok, run, sqlite_config
from tests.stores import pg


def postgres_config(tmp_path: Path, schema: str) -> Path:
    path = tmp_path / "postgres.toml"
    path.write_text(f'[memory]\nenabled = true\norganization = "acme"\nadmins = ["{ADMIN}"]\n'
                    f'store = "postgres"\n[memory.stores.postgres]\ndsn = "{pg.dsn()}"\n'
                    f'schema = "{schema}"\n')
    return path


@pytest.fixture(params=["sqlite", "postgres", "worker"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    if request.param == "sqlite":
        yield sqlite_config(tmp_path, "data")
    elif request.param == "worker":
        yield worker_config(tmp_path, request.getfixturevalue("worker"))
    else:
        pg.require()
        schema = pg.new_schema()
        try:
            yield postgres_config(tmp_path, schema)
        finally:
            pg.drop_schemas(schema)


def exported(config: Path, scope_key: str) -> list[dict[str, object]]:
    out = ok(run(config, "export", "--scope", scope_key, "--operator")).output
    return [json.loads(text) for text in out.splitlines() if text.startswith("{")]


def test_forget_person_deletes_their_scope_and_scrubs_their_id_everywhere(
        config: Path, tmp_path: Path):
    # Keys of this test's own (the worker is shared by the module's tests).
    tag = str(zlib.crc32(tmp_path.name.encode()) % 10**6)  # short: never taken for a secret
    uid, org, peer = f"U{tag}", f"org:o{tag}", f"user:slack:P{tag}"
    person = f"user:slack:{uid}"
    lines = [line(1, org, source_thread_key=f"slack:D1:{uid}"),
             line(2, org, source_thread_key="slack:C1/1", source_run_id=f"run-{uid}-7"),
             line(3, org, source_thread_key=f"slack:C1:{uid}9"),
             line(1, person), line(2, person),
             line(1, peer, source_thread_key=f"dm:{uid}:P{tag}")]
    ok(run(config, "import", "-", stdin="\n".join(lines).encode()))
    refused = run(config, "forget-person", person, "--yes")
    assert refused.exit_code == 2 and "--operator" in refused.output
    asked = run(config, "forget-person", person, "--operator", stdin=b"n\n")
    assert asked.exit_code == 1 and "Aborted" in asked.output
    assert len(exported(config, person)) == 2
    for key in (org, "user:slack:", "user::U1", "user:U1"):
        bad = run(config, "forget-person", key, "--operator", "--yes")
        assert bad.exit_code == 2 and "not a person's scope key" in bad.output, key
    done = ok(run(config, "forget-person", person, "--operator", "--yes", "--json"))
    assert json.loads(done.output) == {"ok": True, "scopeKey": person, "deleted": 2,
                                       "scrubbed": {org: 2, peer: 1}}
    assert exported(config, person) == []
    assert [(r["sourceThreadKey"], r.get("sourceRunId")) for r in exported(config, org)] == [
        ("slack:D1:removed", None), ("slack:C1/1", "run-removed-7"),
        (f"slack:C1:{uid}9", None)]
    assert exported(config, peer)[0]["sourceThreadKey"] == f"dm:removed:P{tag}"
    again = ok(run(config, "forget-person", person, "--operator", "--yes"))
    assert again.output.splitlines() == [f"deleted 0 records of {person}",
                                         "no other scope's provenance named them"]


def test_purge_deletes_dead_rows_past_the_retention_now(tmp_path: Path):
    config = sqlite_config(tmp_path, "data")
    config.write_text(config.read_text().replace("[memory]\n", "[memory]\nretention_days = 0\n"))
    dead = line(2, status=Status.SUPERSEDED)
    ok(run(config, "import", "-", stdin=f"{line(1)}\n{dead}".encode()))
    assert len(exported(config, "org:acme")) == 2
    refused = run(config, "purge")
    assert refused.exit_code == 2 and "--operator" in refused.output
    done = ok(run(config, "purge", "--operator", "--json"))
    assert json.loads(done.output) == {"ok": True, "purged": 1, "scrubbed": 0}
    assert [r["id"] for r in exported(config, "org:acme")] == ["mem:org:acme:1"]
    assert ok(run(config, "purge", "--operator")).output.strip() == (
        "purged 0 dead records; scrubbed the text of 0 swept records")
