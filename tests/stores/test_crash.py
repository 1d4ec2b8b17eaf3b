"""An acknowledged write survives the writer being killed at any moment; a batch is all or
nothing.

A child process (``crash_child.py``) writes batches to a SqliteStore and prints each batch's
tag once ``write`` has returned. The parent kills it with SIGKILL at a random moment, then,
before any store opens the file again (so nothing is repaired first), checks with a plain
apsw connection: ``PRAGMA integrity_check``, the FTS5 integrity check, that the token index
holds exactly the active rows, that every acknowledged batch is fully there, that any other
batch is either fully there or absent, and that each batch's supersede of the previous head
landed together with the batch, and that the scope's counters count exactly the rows there.
The runs share one database, so each run also recovers from the previous kill.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import apsw
import pytest

from scopemem.stores.sqlite import SqliteStore
from tests.stores.crash_child import BATCH, SCOPE, tag

ROOT = Path(__file__).resolve().parents[2]
RUNS = 15

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")


def spawn(directory: Path, run: int) -> subprocess.Popen[bytes]:
    # Unbuffered bytes: ``readline`` then reads no further than the line, so what follows is
    # left for ``communicate`` (which reads the pipe itself, not a text wrapper's buffer: a
    # buffered first ``readline`` could swallow the acknowledgements just after it).
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.stores.crash_child", str(directory), str(run)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)


def check_database(path: str, acknowledged: set[str], runs_so_far: int) -> int:
    conn = apsw.Connection(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        conn.execute("INSERT INTO records_fts (records_fts) VALUES ('integrity-check')")
        active = {seq for (seq,) in conn.execute(
            "SELECT seq FROM records WHERE status = 'active'")}
        indexed = {rowid for (rowid,) in conn.execute("SELECT rowid FROM records_fts")}
        assert indexed == active

        rows = conn.execute("SELECT source_run_id, id, status, text FROM records ORDER BY seq"
                            ).fetchall()
        by_tag: dict[str, list[tuple[str, str, str]]] = collections.defaultdict(list)
        for name, record_id, status, text in rows:
            by_tag[name].append((record_id, status, text))
        for name, members in by_tag.items():
            assert len(members) == BATCH, (name, members)  # never half a batch
        missing = acknowledged - set(by_tag)
        assert not missing, f"acknowledged batches lost: {sorted(missing)}"

        for run in range(runs_so_far):
            present = [n for n in range(10_000) if tag(run, n) in by_tag]
            # Batches of one run land in order: no gaps, at most one unacknowledged at the end.
            assert present == list(range(len(present)))
            unacked = [n for n in present if tag(run, n) not in acknowledged]
            assert unacked in ([], [len(present) - 1])
            for n in present:
                head_status = by_tag[tag(run, n)][0][1]
                later = n + 1 in present
                assert head_status == ("superseded" if later else "active"), (run, n)
                assert all(status == "active" for _, status, _ in by_tag[tag(run, n)][1:])
        # The counters commit with the rows they count: after any kill they agree exactly
        # (nothing is purged or evicted here, so every row ever written is still a row).
        counted = dict(conn.execute("SELECT name, sum(value) FROM counters GROUP BY name"))
        superseded = sum(1 for _, _, status, _ in rows if status == "superseded")
        assert counted.get("inserted", 0) == len(rows)
        assert counted.get("superseded", 0) == superseded
        return len(rows)
    finally:
        conn.close()


def test_killed_writers_lose_nothing_acknowledged(tmp_path: Path):
    seed = int(os.environ.get("SCOPEMEM_CRASH_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    directory = tmp_path / "data"
    path = SqliteStore(directory).path_for(SCOPE)
    acknowledged: set[str] = set()
    for run in range(RUNS):
        child = spawn(directory, run)
        assert child.stdout is not None and child.stderr is not None
        watchdog = threading.Timer(60, child.kill)  # a wedged child must not hang the suite
        watchdog.start()
        first = ""
        if run % 3 != 0:
            # Most runs: let the writer get going, then kill it mid-stream.
            first = child.stdout.readline().decode()
            assert first, f"child died early (seed {seed}): {child.stderr.read()!r}"
            time.sleep(rng.uniform(0.0, 0.25))
        else:
            # Every third: kill at a random moment from start-up on (open, schema, recovery).
            time.sleep(rng.uniform(0.05, 0.6))
        child.send_signal(signal.SIGKILL)
        out_bytes, err_bytes = child.communicate(timeout=30)
        out, err = out_bytes.decode(), err_bytes.decode(errors="replace")
        watchdog.cancel()
        assert child.returncode == -signal.SIGKILL, f"seed {seed}: {err}"
        lines = [first, *out.splitlines()]
        acknowledged.update(line.strip() for line in lines if line.strip())
        if os.path.exists(path):
            try:
                check_database(path, acknowledged, run + 1)
            except AssertionError as exc:
                raise AssertionError(f"run {run}, SCOPEMEM_CRASH_SEED={seed}: {exc}") from exc
    assert acknowledged, f"no batch was ever acknowledged (seed {seed})"
