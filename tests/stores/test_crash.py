"""An acknowledged write survives the writer being killed at any moment; a batch is all or
nothing.

A child process (``crash_child.py``) writes batches to the SQLite store and sends each
batch's tag down a pipe once ``write`` has returned. The parent kills it with SIGKILL at a
random moment, then, before any store opens the file again (so nothing is repaired first),
checks the scope's shard with a plain apsw connection: ``PRAGMA integrity_check``, the
FTS5 integrity check, that the token index holds exactly the active rows' terms, that
every acknowledged batch is fully there, that any other batch is either fully there or
absent, and that each batch's supersede of the previous head landed together with the
batch, and that the scope's counters count exactly the rows there. The runs share one
database, so each run also recovers from the previous kill.

A second test kills a writer of many scopes through a store whose own moving parts are all
in motion: scopes sharing shard files, use counts saved in the background, WALs checkpointed
every few pages.
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw
import pytest

from scopemem.stores.sqlite_shared import schema as shared_schema
from tests.stores.crash_child import BATCH, MANY_LIMIT, MANY_SCOPES, SCOPE, child, tag
from tests.stores.shared_postings import scope_postings

RUNS = 15

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")

# The children are forked from a server process that imported the store once: a run costs a
# fork, not an interpreter's start-up, and each child still starts with no store open.
FORKS = multiprocessing.get_context("forkserver")
FORKS.set_forkserver_preload(["tests.stores.crash_child"])


class Child:
    """A writer in a process of its own (``crash_child.child``) and the pipe it acknowledges
    down."""

    def __init__(self, directory: Path, run: int, mode: str = "") -> None:
        self.acks, sending = FORKS.Pipe(duplex=False)
        self.process = FORKS.Process(target=child, args=(str(directory), run, mode, sending),
                                     daemon=True)
        self.process.start()
        sending.close()  # the child's end only: the pipe ends when the child does

    def first(self, seed: int) -> str:
        """The first acknowledgement (a minute at most: a wedged child fails the test)."""
        assert self.acks.poll(60), f"no acknowledgement in a minute (seed {seed})"
        try:
            line = self.acks.recv_bytes().decode()
        except EOFError:
            line = ""
        assert line and not line.startswith("!"), f"child died early (seed {seed}): {line}"
        return line

    def kill(self) -> list[str]:
        """SIGKILL it; every acknowledgement it sent before it died."""
        self.process.kill()
        self.process.join(30)
        assert self.process.exitcode == -signal.SIGKILL, self.process.exitcode
        lines = []
        while self.acks.poll():
            try:
                lines.append(self.acks.recv_bytes().decode())
            except EOFError:
                break
        self.acks.close()
        failed = [line for line in lines if line.startswith("!")]
        assert not failed, failed[0]
        return lines


@contextmanager
def writer(directory: Path, run: int, mode: str = "") -> Iterator[Child]:
    started = Child(directory, run, mode)
    watchdog = threading.Timer(60, started.process.kill)  # a wedged child must not hang us
    watchdog.start()
    try:
        yield started
    finally:
        watchdog.cancel()
        if started.process.exitcode is None:
            started.process.kill()
            started.process.join(30)


def check_whole(conn: apsw.Connection, scope: str) -> None:
    """The shard passes SQLite's and FTS5's integrity checks and the scope's token index
    holds exactly its active rows' terms."""
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    # FTS5's own check of the token index's structure (raises when it is damaged).
    conn.execute("INSERT INTO terms_fts (terms_fts, rank) VALUES ('integrity-check', 0)")
    held = {(term, seq) for seq, tokens in conn.execute(
        "SELECT seq, tokens FROM records WHERE scope_key = ? AND status = 'active'", (scope,))
        for term in tokens.split()}
    assert scope_postings(conn, scope) == held


def check_database(path: str, acknowledged: set[str], runs_so_far: int) -> int:
    conn = apsw.Connection(path)
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'records'").fetchall():
            # Killed as its first write opened it: the schema (one transaction) was not
            # committed; the next open applies it.
            assert not acknowledged, f"acknowledged batches lost: {sorted(acknowledged)}"
            return 0
        check_whole(conn, SCOPE)
        rows = conn.execute("SELECT source_run_id, id, status, text FROM records"
                            " WHERE scope_key = ? ORDER BY seq", (SCOPE,)).fetchall()
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
        counted = dict(conn.execute("SELECT name, sum(value) FROM counters"
                                    " WHERE scope_key = ? GROUP BY name", (SCOPE,)))
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
    path = directory / shared_schema.shard_file_name(shared_schema.shard_of(SCOPE))
    acknowledged: set[str] = set()
    for run in range(RUNS):
        with writer(directory, run) as started:
            first = ""
            if run % 3 != 0:
                # Most runs: let the writer get going, then kill it mid-stream.
                first = started.first(seed)
                time.sleep(rng.uniform(0.0, 0.25))
            else:
                # Every third: kill at a random moment from start-up on (open, schema,
                # recovery, the first writes).
                time.sleep(rng.uniform(0.0, 0.2))
            lines = [first, *started.kill()]
        acknowledged.update(line.strip() for line in lines if line.strip())
        if os.path.exists(path):
            try:
                check_database(str(path), acknowledged, run + 1)
            except AssertionError as exc:
                raise AssertionError(f"run {run}, SCOPEMEM_CRASH_SEED={seed}: {exc}") from exc
    assert acknowledged, f"no batch was ever acknowledged (seed {seed})"


Check = Callable[[int, dict[str, set[str]], collections.Counter[str]], None]


def kill_in_turn(directory: Path, mode: str, rng: random.Random, seed: int, check: Check
                 ) -> dict[str, set[str]]:
    """``RUNS`` children of ``mode`` writing to ``MANY_SCOPES`` in turn, each killed at a
    random moment, then ``check(run, written, hits)`` with the batches acknowledged per
    scope and the hits retrievals returned per scope so far; the batches acknowledged."""
    written: dict[str, set[str]] = collections.defaultdict(set)
    hits: collections.Counter[str] = collections.Counter()
    for run in range(RUNS):
        with writer(directory, run, mode) as started:
            first = started.first(seed)
            time.sleep(rng.uniform(0.0, 0.4))
            lines = [first, *started.kill()]
        for line in lines:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "W":
                written[parts[1]].add(parts[2])
            elif len(parts) == 3 and parts[0] == "R":
                hits[parts[1]] += int(parts[2])
        check(run, written, hits)
    return written


def check_shard_file(path: str, written: dict[str, set[str]], used_at_most: dict[str, int]
                     ) -> None:
    """A shard of the shared-layout run, after a kill: whole; each scope's postings exactly
    its active rows' terms, its row in ``scopes`` counting its active rows and above its
    highest seq; every acknowledged batch there and no batch in part; its counters counting
    its rows; its use counts never more than its retrievals could have added."""
    conn = apsw.Connection(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        for scope, last_seq, active in conn.execute(
                "SELECT scope_key, last_seq, active FROM scopes").fetchall():
            check_whole(conn, scope)
            rows = conn.execute("SELECT seq, status, tokens, source_run_id, use_count"
                                " FROM records WHERE scope_key = ?", (scope,)).fetchall()
            assert active == sum(status == "active" for _s, status, *_ in rows)
            assert last_seq >= max((seq for seq, *_ in rows), default=0)
            batches = collections.Counter(name for *_x, name, _u in rows)
            assert all(count == BATCH for count in batches.values()), batches
            missing = written[scope] - set(batches)
            assert not missing, f"acknowledged batches lost: {sorted(missing)}"
            counted = dict(conn.execute("SELECT name, sum(value) FROM counters"
                                        " WHERE scope_key = ? GROUP BY name", (scope,)))
            assert counted.get("inserted", 0) == len(rows)
            used = sum(uses for *_x, uses in rows)
            assert used <= used_at_most[scope], (scope, used, used_at_most[scope])
    finally:
        conn.close()


def test_killed_while_shared_shards_save_and_checkpoint_nothing_is_lost(tmp_path: Path):
    """The shared-file layout under SIGKILL: five scopes in two shard files, writes to them
    in turn, use counts saved in the background at once (one transaction per shard), WALs
    checkpointed every 16 pages. After every kill each shard is checked as it was left."""
    from tests.stores.crash_child import SHARED_SHARDS

    seed = int(os.environ.get("SCOPEMEM_CRASH_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    directory = tmp_path / "data"
    paths = [directory / shared_schema.shard_file_name(index, SHARED_SHARDS)
             for index in range(SHARED_SHARDS)]

    def check(run: int, written: dict[str, set[str]], hits: collections.Counter[str]) -> None:
        # At most one retrieval per run was under way, unacknowledged, at the kill.
        limits = {scope: hits[scope] + MANY_LIMIT * (run + 1) for scope in MANY_SCOPES}
        for path in paths:
            if path.exists():
                try:
                    check_shard_file(str(path), written, limits)
                except AssertionError as exc:
                    raise AssertionError(
                        f"run {run}, {path.name}, SCOPEMEM_CRASH_SEED={seed}: {exc}") from exc

    written = kill_in_turn(directory, "shared", rng, seed, check)
    assert sum(map(len, written.values())) > RUNS, f"too few writes acknowledged (seed {seed})"
