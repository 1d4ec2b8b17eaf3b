"""A data directory written by the file layout (a SQLite file per scope) is migrated into the
shared layout once, when it is opened: every record and status, id, use count and time, each
scope's next id and its day counters; the old files kept in a backup folder; one log line.

``tests/fixtures/file-layout-2026-12-07`` was written by the file layout of the release
before the migration (see its README): ``data/`` the directory, ``export.jsonl`` what
``scopemem export`` gave of it then, ``counters.jsonl`` what ``read_counts`` gave.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from scopemem.core.porting import record_line
from scopemem.core.records import Candidate, CountRow, Kind
from scopemem.errors import StoreError
from scopemem.stores.base import StoreSettings
from scopemem.stores.porting import export_records
from scopemem.stores.sqlite import from_settings as sqlite_store
from scopemem.stores.sqlite_shared import SharedSqliteStore, migrate

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
FIXTURE = FIXTURES / "file-layout-2026-12-07"
OLD_SCHEMA = FIXTURES / "sqlite-before-folding"
OLD_SCHEMA_EXPORT = FIXTURES / "sqlite-before-folding-export.jsonl"


def fact(text: str) -> Candidate:
    return Candidate(kind=Kind.FACT, text=text, source_thread_key="slack:C1/1")


def scope_files(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.glob("*.db") if "shard-" not in path.name)


def shard_files(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.glob("shard-*.db"))


def copy_fixture(tmp_path: Path, source: Path = FIXTURE / "data") -> Path:
    directory = tmp_path / "data"
    shutil.copytree(source, directory)
    return directory


def expected_counters() -> list[CountRow]:
    return [CountRow(*json.loads(line))
            for line in (FIXTURE / "counters.jsonl").read_text().splitlines()]


async def export_text(store: object) -> str:
    return "".join([record_line(r) + "\n" async for r in export_records(store)])  # type: ignore[arg-type]


def retired_at(path: Path, scope_key: str | None = None) -> list[tuple[int, int | None]]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        where = "" if scope_key is None else " WHERE scope_key = ?"
        return conn.execute(f"SELECT seq, retired_at FROM records{where} ORDER BY seq",
                            () if scope_key is None else (scope_key,)).fetchall()
    finally:
        conn.close()


def default_store(directory: Path) -> object:
    """The store the default configuration opens on ``directory``."""
    return sqlite_store(StoreSettings(name="sqlite", options={"path": str(directory)}))


async def test_a_file_layout_directory_is_migrated_once_when_opened(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="scopemem.stores.sqlite")
    directory = copy_fixture(tmp_path)
    old_files = scope_files(directory)
    store = default_store(directory)
    try:
        assert isinstance(store, SharedSqliteStore)
        # Every record of every status with its id, times and use counts, byte for byte as
        # the file layout exported it; every counter row.
        assert await export_text(store) == (FIXTURE / "export.jsonl").read_text()
        assert await store.read_counts() == expected_counters()
    finally:
        await store.close()
    [line] = [r for r in caplog.records if "migrated" in r.getMessage()]
    backup = directory / migrate.BACKUP
    assert line.levelname == "WARNING"
    assert line.getMessage() == (
        f"sqlite store: migrated {directory} from the file layout to the shared layout:"
        " 5 scopes, 13 records, 12 counter rows; the old files are in"
        f" {backup} (remove that folder once you no longer need them)")
    # The old files are kept, as they were, in the backup folder; nothing else is left.
    assert scope_files(directory) == []
    assert scope_files(backup) == old_files
    for name in old_files:
        assert (backup / name).read_bytes() == (FIXTURE / "data" / name).read_bytes()
    assert sorted(os.listdir(directory)) == sorted([migrate.BACKUP, *shard_files(directory)])
    # Each dead row keeps the time it died (so the retention runs as it would have).
    evicted = backup / "channel_slack_C1-53f375767d349bf8d5afa9479f14d076.db"
    [shard] = [directory / name for name in shard_files(directory)
               if retired_at(directory / name, "channel:slack:C1")]
    assert retired_at(shard, "channel:slack:C1") == retired_at(evicted)
    assert retired_at(evicted)[0][1] is not None
    caplog.clear()
    store = default_store(directory)  # opened again: nothing more to do
    try:
        assert await export_text(store) == (FIXTURE / "export.jsonl").read_text()
        # channel:slack:C2 gave ids 3 and 4 to rows evicted and purged at once: its next id
        # stays above them.
        await store.write("channel:slack:C2", [fact("a fact written after the migration")])
        assert [r.id for r in await store.list("channel:slack:C2", 1)] == [
            "mem:channel:slack:C2:5"]
    finally:
        await store.close()
    assert not [r for r in caplog.records if "migrated" in r.getMessage()]


async def test_a_folder_of_the_backups_name_is_left_alone(tmp_path):
    directory = copy_fixture(tmp_path)
    old_files = scope_files(directory)
    mine = directory / migrate.BACKUP
    mine.mkdir()
    (mine / "notes.txt").write_text("the operator's own")
    store = default_store(directory)
    try:
        assert await export_text(store) == (FIXTURE / "export.jsonl").read_text()
    finally:
        await store.close()
    assert os.listdir(mine) == ["notes.txt"]
    assert scope_files(directory / f"{migrate.BACKUP}-2") == old_files


#: Queries, and the ids the file layout's store retrieved for them from the fixture, in order.
QUERIES = [
    ("org:acme", "staging deploys", ["mem:org:acme:4", "mem:org:acme:3"]),
    ("org:acme", "vpn cluster review", ["mem:org:acme:4", "mem:org:acme:3"]),
    ("repo:acme/api", "tests postgres flaky", ["mem:repo:acme/api:3", "mem:repo:acme/api:1"]),
    ("channel:slack:C1", "office lunch", ["mem:channel:slack:C1:3", "mem:channel:slack:C1:2"]),
    ("user:slack:U7", "langue french", ["mem:user:slack:U7:1"]),
]


async def test_the_migrated_directory_answers_as_the_file_layout_did(tmp_path):
    """The token index is built from the records: every retrieval finds and ranks what the
    file layout found, in the same order."""
    store = default_store(copy_fixture(tmp_path))
    try:
        for scope_key, query, expected in QUERIES:
            assert [r.id for r in await store.retrieve(scope_key, query, 10)] == expected
    finally:
        await store.close()


async def test_a_file_of_an_older_schema_is_upgraded_in_a_copy_and_migrated(tmp_path):
    """A scope file written before Unicode folding (schema version 3) migrates as the file
    layout read it after upgrading it (``OLD_SCHEMA_EXPORT``: what it exported then), and the
    file in the backup is left as it was."""
    expected = OLD_SCHEMA_EXPORT.read_text(encoding="utf-8")
    directory = copy_fixture(tmp_path, OLD_SCHEMA)
    store = SharedSqliteStore(directory)
    try:
        assert await export_text(store) == expected
        assert [r.text for r in await store.retrieve("org:acme", "cafe FERME", 5)] == [
            "Le café est fermé le lundi", "a thread about the café hours"]
    finally:
        await store.close()
    [name] = scope_files(directory / migrate.BACKUP)
    assert (directory / migrate.BACKUP / name).read_bytes() == \
        next(OLD_SCHEMA.glob("*.db")).read_bytes()


async def test_a_file_that_is_not_scopemems_stops_the_migration_and_nothing_moves(tmp_path):
    directory = copy_fixture(tmp_path)
    other = directory / f"notes-{'0' * 32}.db"
    conn = apsw.Connection(str(other))
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.close()
    before = sorted(os.listdir(directory))
    with pytest.raises(StoreError, match=rf"cannot migrate {other}.*not a scope file"):
        default_store(directory)
    after = sorted(os.listdir(directory))
    # No shard file, no backup; the read-only opens may leave -wal/-shm beside the files.
    assert [name for name in after if name.endswith(".db")] == \
        [name for name in before if name.endswith(".db")]
    assert not (directory / migrate.BACKUP).exists()
    assert not (directory / migrate.BUILDING).exists()
    for name in scope_files(FIXTURE / "data"):
        assert (directory / name).read_bytes() == (FIXTURE / "data" / name).read_bytes()


#: A process of an older release using a scope file: it opens it and reads, as the file
#: layout's store does, and keeps the connection until told to end.
HOLDER = ("import apsw, sys\n"
          "conn = apsw.Connection(sys.argv[1])\n"
          "conn.execute('SELECT count(*) FROM records').fetchall()\n"
          "print('open', flush=True)\n"
          "sys.stdin.readline()\n")


async def test_a_scope_file_another_process_holds_open_stops_the_migration(tmp_path):
    """A process of the older release still running would go on writing into the file moved
    to the backup, acknowledged and never read again: nothing moves while one holds a scope
    file open, and the error says what to stop."""
    directory = copy_fixture(tmp_path)
    held = directory / "org_acme-255ae7f79a8a2c14a5e5c38f677bcde2.db"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(held)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        with pytest.raises(StoreError) as raised:
            default_store(directory)
        assert str(raised.value) == (
            f"sqlite store: cannot migrate {directory} from the file layout: {held} is open"
            " in another process (a scopemem of an older release still running?); stop"
            " every process using the directory, then open it again (nothing was moved)")
        assert shard_files(directory) == [] and not (directory / migrate.BACKUP).exists()
        assert scope_files(directory) == scope_files(FIXTURE / "data")
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=30)
    store = default_store(directory)  # the older process stopped: the migration runs
    try:
        assert await export_text(store) == (FIXTURE / "export.jsonl").read_text()
    finally:
        await store.close()


async def test_a_copied_scope_file_is_skipped_with_a_warning_and_kept(tmp_path, caplog):
    """A file holding a scope whose file is another (copied or renamed) was never read by
    the file layout: it is not migrated, but kept in the backup, and the log says so."""
    directory = copy_fixture(tmp_path)
    stray = f"copy-{'a' * 32}.db"
    shutil.copyfile(directory / "org_acme-255ae7f79a8a2c14a5e5c38f677bcde2.db",
                    directory / stray)
    store = default_store(directory)
    try:
        assert await export_text(store) == (FIXTURE / "export.jsonl").read_text()
    finally:
        await store.close()
    assert stray in scope_files(directory / migrate.BACKUP)
    [line] = [r for r in caplog.records if "migrated" in r.getMessage()]
    assert f"skipped (kept in the backup): {stray}" in \
        line.getMessage()


def test_validating_the_settings_migrates_nothing(tmp_path):
    directory = copy_fixture(tmp_path)
    before = sorted(os.listdir(directory))
    sqlite_store(StoreSettings(name="sqlite", options={"path": str(directory)},
                               validate_only=True))
    assert sorted(os.listdir(directory)) == before


async def test_the_retired_file_layout_setting_is_warned_about_and_migrates(tmp_path, caplog,
                                                                          monkeypatch):
    """``layout = "file"`` is no longer a layout: the setting is warned about, once, and the
    directory is migrated and read in the shared layout, as without it."""
    import scopemem.stores.sqlite_shared.options as sqlite_options

    monkeypatch.setattr(sqlite_options, "_warned", set())
    directory = copy_fixture(tmp_path)
    for _ in range(2):
        store = sqlite_store(StoreSettings(name="sqlite", options={
            "path": str(directory), "layout": "file"}))
        try:
            assert isinstance(store, SharedSqliteStore)
            assert await export_text(store) == (FIXTURE / "export.jsonl").read_text()
        finally:
            await store.close()
    [retired] = [r for r in caplog.records if "is retired" in r.getMessage()]
    assert retired.levelname == "WARNING" and retired.getMessage().startswith(
        'memory.stores.sqlite.layout = "file": the file layout')
    assert len([r for r in caplog.records if "store: migrated" in r.getMessage()]) == 1
    assert shard_files(directory) and scope_files(directory) == []


# --- killed mid-migration, and two processes at once -------------------------------------

CHILD = """
import logging, os, sys, time
from scopemem.stores.sqlite_shared import SharedSqliteStore, migrate

logging.basicConfig(level=logging.INFO, format="%(message)s")

def pause():
    print("paused", flush=True)
    time.sleep(120)  # killed long before; bounded if the parent is gone
    os._exit(3)

point = sys.argv[2]
if point == "building":  # the second scope is in the new shards, not yet all of them
    check, done = migrate._check, []
    def checked(conn, scope):
        check(conn, scope)
        done.append(scope)
        if len(done) == 2:
            pause()
    migrate._check = checked
elif point == "moving":  # the new shards are final; the old files are moved aside
    sync = migrate._sync_dir
    def synced(path):
        sync(path)
        if os.path.basename(path) == "file-layout":
            pause()
    migrate._sync_dir = synced
SharedSqliteStore(sys.argv[1])
print("opened", flush=True)
"""


def spawn(directory: Path, point: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", CHILD, str(directory), point], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)


def kill_when_paused(child: subprocess.Popen[bytes]) -> None:
    assert child.stdout is not None
    line = child.stdout.readline()  # the child prints it, or exits (EOF)
    assert line == b"paused\n", child.communicate(timeout=60)
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL


@pytest.mark.parametrize("point", ["building", "moving"])
async def test_a_migration_killed_midway_is_done_again_by_the_next_open(tmp_path, point):
    """Killed while the new shards are built, the old files are untouched and the next open
    migrates from scratch; killed after they were verified and committed, while files move,
    the next open finishes the moves. Either way nothing is lost."""
    directory = copy_fixture(tmp_path)
    old_files = scope_files(directory)
    kill_when_paused(spawn(directory, point))
    if point == "building":
        assert (directory / migrate.BUILDING).is_dir()
        assert scope_files(directory) == old_files and shard_files(directory) == []
        for name in old_files:
            assert (directory / name).read_bytes() == (FIXTURE / "data" / name).read_bytes()
    else:
        assert (directory / migrate.BUILT).is_dir() and scope_files(directory) == []
    store = default_store(directory)
    try:
        assert await export_text(store) == (FIXTURE / "export.jsonl").read_text()
        assert await store.read_counts() == expected_counters()
    finally:
        await store.close()
    assert sorted(os.listdir(directory)) == sorted([migrate.BACKUP, *shard_files(directory)])
    assert scope_files(directory / migrate.BACKUP) == old_files


async def test_a_second_opener_waits_for_the_migration_under_way(tmp_path):
    """Two processes open the directory at once: the second waits on the first's lock
    (and says so), and when the first dies midway, migrates it itself."""
    directory = copy_fixture(tmp_path)
    first = spawn(directory, "building")
    assert first.stdout is not None and first.stdout.readline() == b"paused\n"
    second = spawn(directory, "none")
    try:
        assert second.stderr is not None
        waiting = second.stderr.readline()  # logged before it blocks on the lock
        assert b"another process is migrating" in waiting, second.communicate(timeout=60)
        assert shard_files(directory) == []
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=60)
    out, err = second.communicate(timeout=120)
    assert (second.returncode, out) == (0, b"opened\n"), err
    store = default_store(directory)
    try:
        assert await export_text(store) == (FIXTURE / "export.jsonl").read_text()
    finally:
        await store.close()


FULL_CHILD = """
import resource, signal, sys
from scopemem.stores.sqlite_shared import SharedSqliteStore
from scopemem.errors import StoreError
# A file may not grow past 40,000 bytes: the shard files the migration builds cannot be
# written, as on a disk without room for them (the scope files, 64 KiB, are only read).
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))
try:
    SharedSqliteStore(sys.argv[1])
except StoreError as exc:
    print(exc, flush=True)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs RLIMIT_FSIZE")
async def test_a_migration_that_cannot_write_its_shards_says_the_old_files_are_kept(tmp_path):
    """The shard files the migration builds cannot be written (a disk without room): the
    error says the migration failed, that the old files are kept and that the next open
    tries again, where it named only a shard in the migration's scratch folder."""
    directory = copy_fixture(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.run([sys.executable, "-c", FULL_CHILD, str(directory)], cwd=ROOT,
                           env=env, capture_output=True, timeout=120, check=False)
    said = child.stdout.decode()
    assert child.returncode == 0, child.stderr.decode()
    assert said.startswith(f"sqlite store: migrating {directory} to the shared layout"
                           " failed: "), said
    assert "the old files are kept, and the next open tries again" in said
    assert scope_files(directory) == scope_files(FIXTURE / "data")
    assert not (directory / migrate.BUILDING).exists() and shard_files(directory) == []
    store = default_store(directory)  # with room again, the next open migrates it
    try:
        assert await export_text(store) == (FIXTURE / "export.jsonl").read_text()
    finally:
        await store.close()
