"""The writer ``test_crash.py`` kills: run as ``python -m tests.stores.crash_child DIR RUN``.

It writes batches of ``BATCH`` facts to one scope forever. Every fact of a batch carries the
batch's tag (``r<run>b<n>``) as its run id, and the first fact supersedes the first fact of
the previous batch, so a half-applied batch would show as a wrong count or a wrong status.
A batch's tag is printed (and flushed) only after ``write`` returned: that line is the
acknowledgement the parent holds the store to.
"""

from __future__ import annotations

import asyncio
import sys

from scopemem.core.records import Candidate, Kind
from scopemem.stores.sqlite import SqliteStore

SCOPE = "org:crash"
BATCH = 4


def tag(run: int, batch: int) -> str:
    return f"r{run}b{batch}"


async def main(directory: str, run: int) -> None:
    store = SqliteStore(directory, cap=10_000)
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


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
