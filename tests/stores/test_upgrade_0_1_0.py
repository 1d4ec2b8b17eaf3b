"""A data directory (the shared layout, shard schema version 4) or a PostgreSQL schema
(migration 4) written by release 0.1.0, opened by this release: every record, status, id, use
count, time and day counter kept, and one warning line per shard or schema saying what it was
migrated from, since 0.1.0 refuses it afterwards.

``tests/fixtures/shared-layout-0.1.0`` and ``tests/fixtures/postgres-0.1.0`` are what 0.1.0
wrote (see their READMEs), with ``export.jsonl`` what its ``scopemem export --all`` gave and
``counters.jsonl`` what its ``read_counts`` gave.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import apsw

from scopemem.core.porting import record_line
from scopemem.core.records import CountRow
from scopemem.stores.base import StoreSettings
from scopemem.stores.porting import export_records
from scopemem.stores.postgres import migrations
from scopemem.stores.sqlite import from_settings as sqlite_store
from scopemem.stores.sqlite_shared import schema
from tests.stores import pg

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "shared-layout-0.1.0"
SHARDS = ("shard-003-of-016.db", "shard-007-of-016.db", "shard-014-of-016.db")


def copy_fixture(tmp_path: Path) -> Path:
    directory = tmp_path / "data"
    shutil.copytree(FIXTURE / "data", directory)
    return directory


def user_version(path: Path) -> int:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        version: int = conn.execute("PRAGMA user_version").fetchall()[0][0]
        return version
    finally:
        conn.close()


async def assert_holds(store: Any, fixture: Path) -> None:
    """``store`` exports exactly what 0.1.0 exported of ``fixture``, and keeps its counters."""
    exported = "".join([record_line(r) + "\n" async for r in export_records(store)])
    assert exported == (fixture / "export.jsonl").read_text()
    assert await store.read_counts() == [
        CountRow(*json.loads(line))
        for line in (fixture / "counters.jsonl").read_text().splitlines()]


async def test_a_0_1_0_directory_is_read_whole_and_the_log_names_each_shard_migrated(
        tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="scopemem.stores.sqlite")
    directory = copy_fixture(tmp_path)
    assert {user_version(directory / name) for name in SHARDS} == {4}
    store = sqlite_store(StoreSettings(name="sqlite", options={"path": str(directory)}))
    try:
        await assert_holds(store, FIXTURE)
    finally:
        await store.close()
    assert {user_version(directory / name) for name in SHARDS} == {schema.SCHEMA_VERSION}
    lines = sorted(r.getMessage() for r in caplog.records
                   if r.levelno >= logging.WARNING and "schema version" in r.getMessage())
    assert lines == [
        f"sqlite store: {directory / name}: migrated from schema version 4 to"
        f" {schema.SCHEMA_VERSION}; a scopemem that reads only version 4 refuses it from now on"
        for name in SHARDS]
    caplog.clear()
    store = sqlite_store(StoreSettings(name="sqlite", options={"path": str(directory)}))
    try:  # opened again: nothing migrates, nothing is said
        assert len(await store.list("org:acme", 10)) == 2
    finally:
        await store.close()
    assert [r for r in caplog.records if "schema version" in r.getMessage()] == []


async def test_a_new_directory_says_nothing_of_a_migration(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="scopemem.stores.sqlite")
    store = sqlite_store(StoreSettings(name="sqlite", options={"path": str(tmp_path / "d")}))
    try:
        assert await store.list("org:acme", 10) == []
    finally:
        await store.close()
    assert [r for r in caplog.records if "schema version" in r.getMessage()] == []


# --- PostgreSQL: a schema of 0.1.0 (migration 4) ------------------------------------------

PG_FIXTURE = FIXTURE.parent / "postgres-0.1.0"


async def test_a_0_1_0_postgres_schema_is_read_whole_and_the_log_names_the_migrations(caplog):
    import psycopg

    pg.require()
    caplog.set_level(logging.INFO, logger="scopemem.stores.postgres")
    name = pg.new_schema()
    dump = (PG_FIXTURE / "schema.sql").read_text().replace("scopemem_0_1_0", name)
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute(dump)  # type: ignore[call-overload]  # a script, no parameters
    store = pg.make(name)
    try:
        await assert_holds(store, PG_FIXTURE)
        newest = migrations.SCHEMA_VERSION
        lines = [r.getMessage() for r in caplog.records
                 if r.levelno >= logging.WARNING and "migrated" in r.getMessage()]
        applied = ", ".join(f"{m.version} ({m.name})" for m in migrations.MIGRATIONS[4:])
        assert lines == [f"postgres store: schema {name!r} migrated from version 4 to {newest}:"
                         f" {applied}; a scopemem that reads only version 4 refuses it from"
                         " now on"]
        caplog.clear()
        again = pg.make(name)  # another process, later: nothing to migrate, nothing said
        try:
            assert len(await again.list("org:acme", 10)) == 2
        finally:
            await again.close()
        assert [r for r in caplog.records if "migrated" in r.getMessage()] == []
    finally:
        await store.close()
        pg.drop_schemas(name)


async def test_a_new_postgres_schema_says_nothing_of_a_migration(caplog):
    pg.require()
    caplog.set_level(logging.INFO, logger="scopemem.stores.postgres")
    store = pg.make()
    try:
        assert await store.list("org:acme", 10) == []
    finally:
        await store.close()
        pg.drop_schemas(store.schema)
    assert [r for r in caplog.records if "migrated" in r.getMessage()] == []
