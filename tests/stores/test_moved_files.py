"""A shard file that is no longer the one at its path takes no write, and a shard file of
0 bytes is no shard (``docs/sqlite-store.md``, "Durability" and "Errors").

The data directory or a shard file deleted, moved away or replaced under a running store:
every change it would commit is refused with a ``StoreError`` saying what to do, so nothing
is acknowledged into a file no later process opens; once the directory is back, every write
acknowledged before is there. A write to a new shard stopped by a full disk
(``RLIMIT_FSIZE`` in a child process) leaves a 0-byte file: reads of its scopes answer as
with no file, and the next write with room makes it a shard.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs
import pytest

from scopemem.core.records import Candidate, CountRow, Kind, Record
from scopemem.errors import StoreError
from scopemem.stores.health import NOT_READY_FAILED, store_ready
from scopemem.stores.sqlite_shared import SharedSqliteStore, schema
from tests.conftest import FakeClock

ROOT = Path(__file__).resolve().parents[2]
ORG = "org:acme"
REFUSED = "restart the process"


def fact(text: str) -> Candidate:
    return Candidate(kind=Kind.FACT, text=text, source_thread_key="slack:C1/1")


def other_shard_key() -> str:
    """A scope key of a shard other than ``ORG``'s."""
    return next(f"org:k{n}" for n in range(10_000)
                if schema.shard_of(f"org:k{n}") != schema.shard_of(ORG))


async def every_change_is_refused(store: SharedSqliteStore, held: list[Record],
                                  other: str) -> None:
    """Each kind of change the store commits, refused with the operator's remedy; a read
    answers from a connection open, or is refused the same way."""
    try:
        assert [r.text for r in await store.list(ORG, 10)] == [r.text for r in held]
    except StoreError as exc:
        assert REFUSED in str(exc)
    imported = attrs.evolve(held[0], id=f"mem:{ORG}:90")
    changes: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        ("write", lambda: store.write(ORG, [fact("written after the directory went")])),
        ("forget", lambda: store.forget(ORG, held[0].id)),
        ("import", lambda: store.import_records([imported])),
        ("counts", lambda: store.add_counts([CountRow(ORG, 20_000, "inserted", 1)])),
        ("delete", lambda: store.delete_scope(ORG)),
        ("new shard", lambda: store.write(other, [fact("a scope of a shard never opened")])),
    ]
    for name, change in changes:
        with pytest.raises(StoreError, match=REFUSED) as raised:
            await change()
        assert "nothing was written" in str(raised.value), name


async def texts(store: SharedSqliteStore, scope: str) -> list[str]:
    return sorted(r.text for r in await store.list(scope, 50))


async def test_a_data_directory_moved_away_takes_no_write_until_it_is_back(
        tmp_path, clock: FakeClock):
    data, aside = tmp_path / "data", tmp_path / "aside"
    other = other_shard_key()
    store = SharedSqliteStore(data, clock=clock)
    try:
        await store.write(ORG, [fact("the deploy runs on tuesdays")])
        await store.retrieve(ORG, "deploy", 5)  # a read connection too
        held = await store.list(ORG, 10)
        os.rename(data, aside)
        await every_change_is_refused(store, held, other)
        assert not data.exists()  # the directory is not made again
        os.rename(aside, data)  # the same files back: writes go on
        await store.write(ORG, [fact("the backup runs at night")])
    finally:
        await store.close()
    reopened = SharedSqliteStore(data, clock=clock)
    try:
        assert await texts(reopened, ORG) == ["the backup runs at night",
                                              "the deploy runs on tuesdays"]
        assert await reopened.list(other, 5) == []
    finally:
        await reopened.close()


async def test_a_data_directory_deleted_and_restored_from_a_copy_loses_nothing_acknowledged(
        tmp_path, clock: FakeClock):
    """The operator's case: the directory deleted under the store, restored from a copy of
    every file; the process restarted. Nothing is acknowledged in between."""
    data, copy = tmp_path / "data", tmp_path / "copy"
    other = other_shard_key()
    store = SharedSqliteStore(data, clock=clock)
    try:
        await store.write(ORG, [fact("the deploy runs on tuesdays")])
        await store.write(ORG, [fact("the build uses node 20")])
        shutil.copytree(data, copy)  # every file, the -wal files too
        held = await store.list(ORG, 10)
        shutil.rmtree(data)
        await every_change_is_refused(store, held, other)
        shutil.copytree(copy, data)  # restored: other files at the same paths
        with pytest.raises(StoreError, match="was replaced by another file"):
            await store.write(ORG, [fact("written into the old file")])
        assert await store_ready(store) == NOT_READY_FAILED  # /readyz says so
    finally:
        await store.close()
    reopened = SharedSqliteStore(data, clock=clock)
    try:
        assert await texts(reopened, ORG) == ["the build uses node 20",
                                              "the deploy runs on tuesdays"]
        assert await store_ready(reopened) is None
        await reopened.write(ORG, [fact("the backup runs at night")])
        assert len(await reopened.list(ORG, 50)) == 3
    finally:
        await reopened.close()


async def test_a_shard_file_replaced_under_the_store_takes_no_write(tmp_path,
                                                                     clock: FakeClock):
    data = tmp_path / "data"
    store = SharedSqliteStore(data, clock=clock)
    path = data / schema.shard_file_name(schema.shard_of(ORG))
    try:
        await store.write(ORG, [fact("the deploy runs on tuesdays")])
        shutil.copyfile(path, tmp_path / "copy.db")
        os.replace(tmp_path / "copy.db", path)  # its -wal stays: the replacement holds all
        with pytest.raises(StoreError, match=f"{path} was replaced by another file"):
            await store.write(ORG, [fact("written into the old file")])
        with pytest.raises(StoreError, match=REFUSED):
            await store.forget(ORG, f"mem:{ORG}:1")
    finally:
        await store.close()
    reopened = SharedSqliteStore(data, clock=clock)
    try:
        assert await texts(reopened, ORG) == ["the deploy runs on tuesdays"]
    finally:
        await reopened.close()


FULL_DISK_CHILD = """
import asyncio, resource, signal, sys
from scopemem.errors import StoreError
from scopemem.stores.health import NOT_READY_FAILED, store_ready
from scopemem.stores.sqlite_shared import SharedSqliteStore
# No file may grow past 0 bytes: a disk without room. Creating a file still works.
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

async def main():
    store = SharedSqliteStore(sys.argv[1])
    try:
        try:
            await store.write("org:acme", [])
            from scopemem.core.records import Candidate, Kind
            await store.write("org:acme", [Candidate(kind=Kind.FACT, text="lost to the disk",
                                                     source_thread_key="t:1")])
            print("write: acknowledged")
        except StoreError:
            print("write: refused")
        for _ in range(2):
            try:
                print("read:", [r.text for r in await store.list("org:acme", 5)])
            except StoreError as exc:
                print("read failed:", exc)
        print("ready:", await store_ready(store))
    finally:
        await store.close()

asyncio.run(main())
"""


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs RLIMIT_FSIZE")
async def test_a_shard_file_a_full_disk_left_empty_is_no_shard_until_written(
        tmp_path, clock: FakeClock):
    data = tmp_path / "data"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.run([sys.executable, "-c", FULL_DISK_CHILD, str(data)], cwd=ROOT,
                           env=env, capture_output=True, timeout=120, check=False)
    said = child.stdout.decode().splitlines()
    assert child.returncode == 0, child.stderr.decode()
    path = data / schema.shard_file_name(schema.shard_of(ORG))
    assert path.stat().st_size == 0  # what the full disk left
    assert said == ["write: refused", "read: []", "read: []", "ready: None"], said
    store = SharedSqliteStore(data, clock=clock)
    try:
        assert await store.list(ORG, 5) == []
        await store.write(ORG, [fact("the deploy runs on tuesdays")])  # room again
        assert await texts(store, ORG) == ["the deploy runs on tuesdays"]
    finally:
        await store.close()


async def test_a_shard_file_that_is_not_empty_is_never_taken_for_an_empty_one(
        tmp_path, clock: FakeClock):
    """Only a 0-byte file is no shard: any other file at a shard's name is opened as before
    (refused when it is not a shard), and never replaced."""
    data = tmp_path / "data"
    data.mkdir()
    path = data / schema.shard_file_name(schema.shard_of(ORG))
    path.write_bytes(b"not a database, but somebody's bytes")
    store = SharedSqliteStore(data, clock=clock)
    try:
        with pytest.raises(StoreError):
            await store.list(ORG, 5)
        with pytest.raises(StoreError):
            await store.write(ORG, [fact("nothing lands here")])
    finally:
        await store.close()
    assert path.read_bytes() == b"not a database, but somebody's bytes"
