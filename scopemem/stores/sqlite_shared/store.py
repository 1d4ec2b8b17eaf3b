"""``SharedSqliteStore``: every scope in a few shared SQLite files (``docs/storage.md``,
"The shared SQLite layout"). Each part is built here with what it uses.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import os
from collections.abc import Mapping, Sequence

from scopemem.core import engine
from scopemem.core.browse import DEFAULT_REACH_RETENTION_DAYS
from scopemem.core.provenance import person_id
from scopemem.core.ranking import Ranking
from scopemem.core.records import (
    DEFAULT_RETENTION_DAYS,
    DEFAULT_SCOPE_CAP,
    Candidate,
    Kind,
    PurgeResult,
    Record,
    SweepResult,
    WriteCounts,
)
from scopemem.stores.base import (
    DEFAULT_RANKING,
    Clock,
    Hit,
    StoreSettings,
    check_cap,
    check_retention_days,
    check_scope_key,
    retention_cutoff,
    wall_clock_ms,
    write_batch,
)
from scopemem.stores.browsing import check_reach_retention_days
from scopemem.stores.health import NOT_READY_FAILED, read_ready
from scopemem.stores.shared import batches
from scopemem.stores.shared.cache import (
    DEFAULT_MIN_POSTINGS,
    DEFAULT_POSTINGS_CACHE,
    PostingsCache,
    ScopeCopy,
)
from scopemem.stores.shared.calls import listing_stems, search_terms, used_seqs
from scopemem.stores.sqlite_shared import reads, schema, writes
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared.browse import Browse, ReachLog
from scopemem.stores.sqlite_shared.migrate import migrate_file_layout
from scopemem.stores.sqlite_shared.options import (
    DEFAULT_PATH,
    DEFAULT_USAGE_FLUSH_MS,
    OPTIONS,
    SYNCHRONOUS_LEVELS,
    USAGE_FLUSH_MS_MAX,
    check_int,
    check_path,
    check_synchronous,
    retired_options,
)
from scopemem.stores.sqlite_shared.pools import POOL_THREADS, ShardPools
from scopemem.stores.sqlite_shared.porting import Porting
from scopemem.stores.sqlite_shared.shards import Shards
from scopemem.stores.sqlite_shared.usage import PendingUses
from scopemem.stores.sqlite_shared.vectors import Vectors
from scopemem.stores.sqlite_shared.writes import Counts, ScopeLimit

__all__ = ["SharedSqliteStore"]

log = logging.getLogger("scopemem.stores.sqlite")

#: ``cache_rows`` counts rows; the copies are bounded in postings, about twenty a record of
#: realistic text (so the default 50,000 rows is ``DEFAULT_POSTINGS_CACHE``).
POSTINGS_PER_ROW = 20


class SharedSqliteStore:
    """Durable memory in a few SQLite files shared by every scope under ``path``."""

    durable = True

    def __init__(self, path: str | os.PathLike[str], *, cap: int = DEFAULT_SCOPE_CAP,
                 clock: Clock = wall_clock_ms, synchronous: str = "full",
                 busy_timeout_ms: int = 5000, usage_flush_ms: int = DEFAULT_USAGE_FLUSH_MS,
                 ranking: Ranking = DEFAULT_RANKING,
                 retention_days: int = DEFAULT_RETENTION_DAYS, max_scopes: int = 0,
                 shards: int = schema.SHARDS, postings_cache: int = DEFAULT_POSTINGS_CACHE,
                 cache_min_postings: int = DEFAULT_MIN_POSTINGS, migrate: bool = True,
                 reach_retention_days: int = DEFAULT_REACH_RETENTION_DAYS) -> None:
        self.cap = check_cap(cap)
        self.retention_days = check_retention_days(retention_days)
        self.max_scopes = check_int(max_scopes, "max_scopes", 0)
        self.ranking = ranking
        self.analyzer = ranking.analyzer
        self.directory = os.path.abspath(os.path.expanduser(check_path(path, "path")))
        self.synchronous = check_synchronous(synchronous, "synchronous")
        self.usage_flush_ms = check_int(usage_flush_ms, "usage_flush_ms", 0,
                                         USAGE_FLUSH_MS_MAX)
        self._shards = Shards(self.directory, shards=check_int(shards, "shards", 1, 256),
                              synchronous=self.synchronous,
                              busy_timeout_ms=check_int(busy_timeout_ms, "busy_timeout_ms",
                                                        0), analyzer=self.analyzer)
        if migrate:  # a directory of the file layout, once (``migrate.py``)
            migrate_file_layout(self.directory, analyzer=self.analyzer, clock=clock,
                                shards=self._shards.count)
        self._uses = PendingUses(self._shards.count)
        self._pools = ShardPools(self._shards)
        # Copies of scopes' indexes read often, checked against the change counter (``reads.py``).
        self._copies = PostingsCache(check_int(postings_cache, "postings_cache", 0),
                                     check_int(cache_min_postings, "cache_min_postings", 0))
        self._clock = clock
        self._saver: asyncio.Task[None] | None = None
        self._scopes = ScopeLimit(self._shards, self.max_scopes, self.directory)
        counts = Counts(self._shards, self._pools, self._scopes, clock,
                        synchronous=self.synchronous)
        self.add_counts = counts.add_counts
        self.read_counts = counts.read_counts
        self._porting = Porting(self._shards, self._pools, self._uses, self._scopes, clock,
                                self.analyzer)
        self.export_scopes = self._porting.export_scopes
        # Browsing (``browse.py``), its reaches in a file of their own.
        self._browse = Browse(self._shards.count, self._shards.of, self._pools, self._uses,
                              ReachLog(self.directory, clock,
                                       check_reach_retention_days(reach_retention_days),
                                       busy_timeout_ms=busy_timeout_ms,
                                       make_directory=self._shards.make_root))
        self.scope_page = self._browse.scope_page
        self.record_page = self._browse.record_page
        self.record_history = self._browse.record_history
        self.read_count_totals = self._browse.read_count_totals
        self.log_reaches = self._browse.reaches.log
        self.read_reaches = self._browse.reaches.read
        vectors = Vectors(self._shards.of, self._pools, self._uses)
        self.vectors_missing = vectors.vectors_missing
        self.put_vectors = vectors.put_vectors
        self.nearest = vectors.nearest

    def __repr__(self) -> str:
        return f"SharedSqliteStore({self.directory!r}, cap={self.cap!r})"

    @classmethod
    def from_settings(cls, settings: StoreSettings) -> SharedSqliteStore:
        """Build from ``[memory.stores.sqlite]`` (``docs/sqlite-store.md``); the retired
        file layout's options are warned about (``options.py``), and its directory migrated
        unless the settings are only validated."""
        settings = settings.named("sqlite")
        settings.unknown_options(OPTIONS)
        retired_options(settings)
        rows = settings.int_option("cache_rows", DEFAULT_POSTINGS_CACHE // POSTINGS_PER_ROW, 0)
        path = settings.record("path", check_path(
            settings.options.get("path", DEFAULT_PATH), settings.option_key("path")))
        return cls(
            path,
            cap=settings.cap, clock=settings.clock,
            synchronous=settings.choice_option("synchronous", "full", SYNCHRONOUS_LEVELS),
            busy_timeout_ms=settings.int_option("busy_timeout_ms", 5000, 0),
            usage_flush_ms=settings.int_option("usage_flush_ms", DEFAULT_USAGE_FLUSH_MS, 0,
                                               USAGE_FLUSH_MS_MAX),
            ranking=settings.ranking, retention_days=settings.retention_days,
            max_scopes=settings.int_option("max_scopes", 0, 0),
            postings_cache=rows * POSTINGS_PER_ROW, migrate=not settings.validate_only,
            reach_retention_days=settings.reach_retention_days)

    # --- reads ---------------------------------------------------------------------------

    async def retrieve(self, scope_key: str, query: str, limit: int) -> builtins.list[Record]:
        return [hit.record for hit in await self.search(scope_key, query, limit)]

    async def search(self, scope_key: str, query: str, limit: int, *, bump: bool = True
                     ) -> builtins.list[Hit]:
        terms = search_terms(scope_key, query, limit, self.analyzer)
        if terms is None:
            return []
        now = self._clock()
        shard = self._shards.of(scope_key)
        copy = self._copies.latest(scope_key)
        searched = await self._pools.read(shard, reads.search, self._uses, shard,
                                          self.ranking, scope_key, terms, limit, now, bump,
                                          copy)
        if searched is None:
            return []  # no shard file yet
        if copy is not None:
            if searched.stale:
                self._copies.discard(scope_key, copy.generation)
            else:
                self._copies.answered += 1
        if searched.generation is not None:
            self._copies.offer(scope_key, searched.generation, searched.postings_read,
                               self._copy)
        if bump and searched.hits:
            self._schedule_save()
        return searched.hits

    async def _copy(self, scope_key: str) -> ScopeCopy | None:
        """The scope's whole index as it is now (``reads.copy_of``, on the read pool)."""
        return await self._pools.read(self._shards.of(scope_key), reads.copy_of, scope_key)

    async def mark_used(self, used: Mapping[str, Sequence[str]]) -> int:
        now = self._clock()
        marked = 0
        for scope_key, seqs in used_seqs(used):
            shard = self._shards.of(scope_key)
            found = await self._pools.read(shard, reads.mark_used, self._uses, shard,
                                           scope_key, seqs, now)
            marked += len(found or ())
        if marked:
            self._schedule_save()
        return marked

    async def list(self, scope_key: str, limit: int, query: str | None = None,
                   kind: Kind | None = None) -> builtins.list[Record]:
        held = listing_stems(scope_key, limit, query, self.analyzer)
        if held == []:
            return []
        shard = self._shards.of(scope_key)
        rows = await self._pools.read(shard, reads.listing, self._uses, shard, scope_key,
                                      limit, held, kind)
        # The postings and the engine agree by construction; the engine has the last word.
        return engine.listing(rows or [], limit, query=query, kind=kind,
                              analyzer=self.analyzer)

    async def ready(self) -> str | None:
        """Not ready while a shard file this process opened is gone from its path (its
        writes are refused, ``files.OpenedFile``); else ``health.read_ready``."""
        moved = self._shards.moved()
        if moved:
            log.warning("[ready] %s: writes are refused; restore the data directory as it"
                        " was, then restart the process", "; ".join(moved))
            return NOT_READY_FAILED
        return await read_ready(self)

    # --- writes --------------------------------------------------------------------------

    async def write(self, scope_key: str, candidates: Sequence[Candidate],
                    cap: int | None = None) -> WriteCounts:
        fitted, dropped, scope_cap = write_batch(scope_key, candidates, cap, self.cap)
        if not fitted:
            return dropped
        now = self._clock()
        shard = self._shards.of(scope_key)
        counts = await self._pools.write(
            shard, writes.write, self._uses, shard, self.analyzer, scope_key, fitted,
            scope_cap, now, retention_cutoff(now, self.retention_days), self._scopes.reserve,
            create=True)
        assert counts is not None  # created: the shard has a file
        return counts + dropped

    async def forget(self, scope_key: str, record_id: str) -> bool:
        check_scope_key(scope_key)
        seq = batches.seq_in_scope(scope_key, record_id)
        if seq is None:
            return False
        shard = self._shards.of(scope_key)
        done = await self._pools.write(shard, writes.forget, self._uses, shard,
                                       self._shards.path(shard), scope_key, seq, self._clock())
        return bool(done)

    async def delete_scope(self, scope_key: str) -> int:
        """``writes.delete_scope``, then the scope's reaches; the records deleted."""
        check_scope_key(scope_key)
        shard = self._shards.of(scope_key)
        done = await self._pools.write(shard, writes.delete_scope, self._uses, shard,
                                       self._shards.path(shard), scope_key)
        await self._browse.reaches.drop_scope(scope_key)
        return done or 0

    async def scrub_provenance(self, scope_key: str, person_key: str) -> int:
        """``writes.scrub_provenance``, then the scope's reaches naming the person."""
        check_scope_key(scope_key)
        person = person_id(check_scope_key(person_key))
        shard = self._shards.of(scope_key)
        done = await self._pools.write(shard, writes.scrub_provenance, self._uses, shard,
                                       self._shards.path(shard), scope_key, person)
        await self._browse.reaches.scrub(scope_key, person)
        return done or 0

    async def purge(self) -> PurgeResult:
        """``writes.purge`` on every scope, one transaction each."""
        cutoff = retention_cutoff(self._clock(), self.retention_days)
        result = PurgeResult()
        for scope_key in await self.export_scopes():
            shard = self._shards.of(scope_key)
            done = await self._pools.write(shard, writes.purge, self._uses, shard, scope_key,
                                           cutoff)
            if done is not None:
                result += done
        return result

    async def sweep(self, scope_key: str, dry_run: bool = False) -> SweepResult:
        check_scope_key(scope_key)
        shard = self._shards.of(scope_key)
        result = await self._pools.write(shard, writes.sweep, self._uses, shard, scope_key,
                                         self._clock(), dry_run)
        if result is None:  # no shard file yet: nothing to sweep
            return SweepResult(swept=0, ids=()) if dry_run else SweepResult(swept=0)
        return result

    def max_descriptors(self) -> int:
        """Per shard a database and a WAL for each read thread and its writing thread, and
        its shared memory once (``stores.base.descriptors_held``)."""
        return self._shards.count * (2 * (POOL_THREADS + 1) + 1) + 3  # + the reach log

    async def close(self) -> None:
        """Save pending use counts, stop the pools and close every shard. Idempotent."""
        if self._pools.closed:
            return
        await self._copies.close()
        saver, self._saver = self._saver, None
        if saver is not None and not saver.done():
            saver.cancel()
        try:
            await self.flush()
        finally:
            self._pools.close()
            self._shards.close()
            await self._browse.reaches.close()

    async def flush(self) -> None:
        """Save pending use counts now, a transaction per shard; a shard that fails keeps
        them for the next save."""
        for shard in self._uses.shards():
            try:
                await self._pools.write(shard, self._uses.save, shard, self.synchronous)
            except Exception as exc:  # kept pending for the next save
                log.warning("sqlite store: %s: use counts not saved yet: %s",
                            self._shards.path(shard), sqlite_sql.describe(exc))
        if len(self._uses) and not self._pools.closed:
            self._schedule_save()

    def _schedule_save(self) -> None:
        if self._saver is None or self._saver.done():
            self._saver = asyncio.get_running_loop().create_task(self._save_later())

    async def _save_later(self) -> None:
        await asyncio.sleep(self.usage_flush_ms / 1000)
        await self.flush()

    async def export_page(self, scope_key: str, after: int, limit: int
                          ) -> builtins.list[Record]:
        return await self._porting.export_page(scope_key, after, limit)

    async def import_records(self, records: Sequence[Record]) -> int:
        return await self._porting.import_records(records)
