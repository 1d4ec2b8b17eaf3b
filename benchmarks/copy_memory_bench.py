"""Memory a copy of a scope's index holds, per record: what the SQLite store keeps in memory.

    python benchmarks/copy_memory_bench.py [--records 500,10000]

Each scope is written with ``load_bench``'s Zipf text (records of 8-40 words), then its copy
is read (``reads.copy_of``, as the store reads it in the background) under ``tracemalloc``:
the bytes still allocated once the copy is made, over the scope's active records. Prints
figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.load_bench import Zipf, candidates  # noqa: E402
from scopemem.core.records import MAX_SCOPE_CAP  # noqa: E402
from scopemem.stores.sqlite_shared import SharedSqliteStore, reads  # noqa: E402

SCOPE = "repo:memory/bench"


async def held_per_record(records: int) -> tuple[float, int, int]:
    """Bytes per record of a copy of a ``records``-record scope; the postings and records."""
    zipf = Zipf()
    with tempfile.TemporaryDirectory(prefix="scopemem-copy-memory-") as data:
        store = SharedSqliteStore(data, cap=max(records, MAX_SCOPE_CAP), synchronous="off")
        store.cap = records
        try:
            for _ in range(records // 50):
                await store.write(SCOPE, candidates(zipf, 50))
            shard = store._shards.of(SCOPE)
            conn = store._shards.connection(shard, create=False)
            reads.copy_of(conn, SCOPE)  # warm: the connection's statements and tables
            tracemalloc.start()
            copy = reads.copy_of(conn, SCOPE)
            held, _peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert copy is not None
            return held / copy.active, copy.size, copy.active
        finally:
            await store.close()


async def main(counts: list[int]) -> None:
    for records in counts:
        per_record, postings, active = await held_per_record(records)
        print(f"{active:,} records, {postings:,} postings ({postings / active:.1f} a record):"
              f" {per_record:,.0f} bytes a record held in memory"
              f" ({per_record * active / 2**20:.1f} MiB)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default="500,10000")
    args = parser.parse_args()
    asyncio.run(main([int(n) for n in args.records.split(",")]))
