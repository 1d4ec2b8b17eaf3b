"""The writers ``test_crash.py`` kills: run as ``python -m tests.stores.crash_child DIR RUN``
(one scope) or ``... DIR RUN many`` (many scopes).

One scope: it writes batches of ``BATCH`` facts to one scope forever. Every fact of a batch
carries the batch's tag (``r<run>b<n>``) as its run id, and the first fact supersedes the
first fact of the previous batch, so a half-applied batch would show as a wrong count or a
wrong status. A batch's tag is printed (and flushed) only after ``write`` returned: that
line is the acknowledgement the parent holds the store to.

Many scopes (``... DIR RUN shared``): the store's own moving parts under the kill. Batches go
to ``MANY_SCOPES`` in turn, five scopes in two shard files, each write followed by a
retrieval on another scope whose use counts are saved in the background at once, and the
WALs checkpointed every 16 pages. It prints ``W <scope> <tag>`` once a write returned and
``R <scope> <hits>`` once a retrieval did.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from scopemem.core.records import Candidate, Kind
from scopemem.stores.sqlite_shared import SharedSqliteStore

SCOPE = "org:crash"
BATCH = 4
MANY_SCOPES = tuple(f"org:crash{n}" for n in range(5))
MANY_LIMIT = 3  # what one retrieval can add to a scope's use counts
SHARED_SHARDS = 2  # the shared layout's run: five scopes in two files
SHARED_CAP = 40  # ... each evicting past this many active rows


def tag(run: int, batch: int) -> str:
    return f"r{run}b{batch}"


async def main(directory: str, run: int) -> None:
    store = SharedSqliteStore(directory, cap=10_000)
    head: str | None = None
    batch = 0
    while True:
        name = tag(run, batch)
        await store.write(SCOPE, [
            Candidate(kind=Kind.FACT, text=f"{name} fact {i} about the deploy pipeline",
                      source_thread_key="crash/1", source_run_id=name,
                      supersedes=head if i == 0 else None)
            for i in range(BATCH)
        ])
        print(name, flush=True)
        # The batch's first fact is its oldest row: the last of the newest-first listing.
        head = (await store.list(SCOPE, BATCH, query=name))[-1].id
        batch += 1


async def write_in_turn(store: Any, run: int) -> None:
    """Batches to ``MANY_SCOPES`` in turn, each followed by a retrieval on another scope."""
    n = 0
    while True:
        scope = MANY_SCOPES[n % len(MANY_SCOPES)]
        name = tag(run, n)
        await store.write(scope, [
            Candidate(kind=Kind.FACT, text=f"{name} fact {i} about the deploy pipeline",
                      source_thread_key="crash/1", source_run_id=name)
            for i in range(BATCH)
        ])
        print("W", scope, name, flush=True)
        other = MANY_SCOPES[(n * 3 + 1) % len(MANY_SCOPES)]
        hits = await store.retrieve(other, "deploy pipeline", MANY_LIMIT)
        print("R", other, len(hits), flush=True)
        n += 1


async def shared(directory: str, run: int) -> None:
    import apsw

    # Checkpoints every few commits, so kills land among them too. Writes evict at a small
    # cap: kills land among documents indexed, taken out and merged by FTS5.
    apsw.connection_hooks.append(lambda conn: conn.wal_autocheckpoint(16))
    await write_in_turn(SharedSqliteStore(directory, cap=SHARED_CAP, usage_flush_ms=0,
                                          shards=SHARED_SHARDS), run)


if __name__ == "__main__":
    if sys.argv[3:] == ["shared"]:
        asyncio.run(shared(sys.argv[1], int(sys.argv[2])))
    else:
        asyncio.run(main(sys.argv[1], int(sys.argv[2])))
