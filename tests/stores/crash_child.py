"""The writers ``test_crash.py`` kills: ``child(directory, run, mode, acks)``, run in a
process of its own (forked from a server that imported this module once, so a run costs a
fork rather than an interpreter's start-up), sends its acknowledgements down the pipe
``acks``, one line a message, each sent only once what it acknowledges has returned.

One scope (``mode`` ""): it writes batches of ``BATCH`` facts to one scope forever. Every
fact of a batch carries the batch's tag (``r<run>b<n>``) as its run id, and the first fact
supersedes the first fact of the previous batch, so a half-applied batch would show as a
wrong count or a wrong status. A batch's tag is sent only after ``write`` returned: that
line is the acknowledgement the parent holds the store to.

Many scopes (``mode`` "shared"): the store's own moving parts under the kill. Batches go
to ``MANY_SCOPES`` in turn, five scopes in two shard files, each write followed by a
retrieval on another scope whose use counts are saved in the background at once, and the
WALs checkpointed every 16 pages. It sends ``W <scope> <tag>`` once a write returned and
``R <scope> <hits>`` once a retrieval did.

A child that fails sends ``! <traceback>`` instead, for the parent to show.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
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


Ack = Callable[[str], None]


async def main(directory: str, run: int, ack: Ack) -> None:
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
        ack(name)
        # The batch's first fact is its oldest row: the last of the newest-first listing.
        head = (await store.list(SCOPE, BATCH, query=name))[-1].id
        batch += 1


async def write_in_turn(store: Any, run: int, ack: Ack) -> None:
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
        ack(f"W {scope} {name}")
        other = MANY_SCOPES[(n * 3 + 1) % len(MANY_SCOPES)]
        hits = await store.retrieve(other, "deploy pipeline", MANY_LIMIT)
        ack(f"R {other} {len(hits)}")
        n += 1


async def shared(directory: str, run: int, ack: Ack) -> None:
    import apsw

    # Checkpoints every few commits, so kills land among them too. Writes evict at a small
    # cap: kills land among documents indexed, taken out and merged by FTS5.
    apsw.connection_hooks.append(lambda conn: conn.wal_autocheckpoint(16))
    await write_in_turn(SharedSqliteStore(directory, cap=SHARED_CAP, usage_flush_ms=0,
                                          shards=SHARED_SHARDS), run, ack)


def child(directory: str, run: int, mode: str, acks: Connection) -> None:
    """A child's whole life: write until killed."""
    def ack(line: str) -> None:
        # One small message is one write(2) to the pipe: it is there, whole, once this returns.
        acks.send_bytes(line.encode())

    try:
        asyncio.run((shared if mode == "shared" else main)(directory, run, ack))
    except BaseException:
        ack("! " + traceback.format_exc())
        raise
