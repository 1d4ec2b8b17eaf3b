"""``scopemem delete-scope`` through click's CliRunner on real SQLite data directories."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_forget_person import postgres_config
from tests.cli.test_porting import ok, populate, run, sqlite_config
from tests.stores import pg


def listed(config: Path) -> dict[str, list[str]]:
    """Scope key → the ids ``scopemem list all`` shows in it."""
    shown = json.loads(ok(run(config, "list", "all", "--json")).output)
    return {scope["scopeKey"]: [r["id"] for r in scope["records"]]
            for scope in shown["scopes"] if scope["records"]}


def exported(config: Path, scope_key: str) -> list[str]:
    """The ids ``scopemem export`` writes for the scope, whatever their status."""
    out = ok(run(config, "export", "--scope", scope_key)).output
    return [json.loads(line)["id"] for line in out.splitlines() if line.startswith("{")]


def test_delete_scope_deletes_one_scope_and_leaves_the_others(tmp_path: Path):
    config = sqlite_config(tmp_path, "data")
    populate(config)  # org:acme (a forgotten and a superseded record among them), a user's
    before = listed(config)
    assert set(before) == {"org:acme", "user:cli:local"}
    assert exported(config, "org:acme") == [f"mem:org:acme:{n}" for n in range(1, 5)]
    refused = run(config, "delete-scope", "org:acme", "--operator", stdin=b"n\n")
    assert refused.exit_code == 1 and "Aborted" in refused.output
    assert listed(config) == before
    done = ok(run(config, "delete-scope", "org:acme", "--operator", "--yes", "--json"))
    assert json.loads(done.output) == {"ok": True, "scopeKey": "org:acme", "deleted": 4}
    assert listed(config) == {"user:cli:local": before["user:cli:local"]}
    assert exported(config, "org:acme") == []  # forgotten and superseded records too
    again = ok(run(config, "delete-scope", "org:acme", "--operator", "--yes"))
    assert again.output.strip() == "deleted 0 records of org:acme"


def test_delete_scope_refuses_a_bad_key_and_works_on_postgres(tmp_path: Path):
    config = sqlite_config(tmp_path, "data")
    bad = run(config, "delete-scope", "no colon here", "--yes")
    assert bad.exit_code == 2 and "KEY" in bad.output and "Traceback" not in bad.output
    pg.require()
    schema = pg.new_schema()
    other = postgres_config(tmp_path, schema)
    try:
        populate(other)
        done = ok(run(other, "delete-scope", "org:acme", "--operator", "--yes", "--json"))
        assert json.loads(done.output) == {"ok": True, "scopeKey": "org:acme", "deleted": 4}
        assert set(listed(other)) == {"user:cli:local"}
        assert exported(other, "org:acme") == []
    finally:
        pg.drop_schemas(schema)
