"""The embedded durable store: one SQLite database file per scope key, through apsw.

What it decides is decided by ``scopemem.core.engine``, exactly as in the in-process store;
this module only finds the rows the engine asks for and persists what it answers.

Layout
    ``<path>/<readable part>-<32 hex digits>.db``: the readable part is the scope key with
    everything but ASCII letters, digits, ``-`` and ``_`` folded to ``_`` and cut to 40
    characters; the hex digits are the start of the key's SHA-256. The name can never contain
    a path separator or ``..``, and the digest keeps keys that fold alike apart. The key itself
    is stored in the file (table ``meta``) and compared on every open, so a renamed or copied
    file is refused instead of being read as another scope. Removing a scope's data is
    removing its file (with its ``-wal``/``-shm`` companions).

Threads and locks
    apsw releases the GIL while SQLite works, so database calls run on thread pools owned
    by the store and the event loop never waits on disk: one pool for reads, one for
    writes, so writes waiting on the disk never hold the threads reads of other scopes
    need. Three small things run on the event loop itself, each only when it can start at
    once (never waiting on a lock) and each falling back to the pools otherwise: the view's
    staleness check (a one-row read of the ``generation`` table, on a read connection only
    the loop uses), bm25's choice of candidates for a view (on that same connection), and
    the commit that saves usage bumps (on the scope's connection, unsynced, with the WAL
    checkpoint moved to the pool; see ``_commit_on_loop``). Handing such work (a
    millisecond at most) to a thread cost more than doing it: each GIL hand-off back from
    the thread can wait for the loop's switch interval, and on two cores the other core is
    busy too. Saves on the pool served about a quarter fewer retrievals over eight scopes.
    An apsw connection may move between threads but must not be used by two at once: each
    open connection has its own ``threading.Lock``, held for a whole operation; the
    pending bumps and the view have a second lock, held only for dictionary updates. Open
    connections live in a bounded LRU cache (``max_open``); an evicted one is closed
    (committing any pending bumps) once its current user is done, and the scope is not
    reopened before that. Writers to one scope also queue on a per-scope ``asyncio.Lock``
    so a burst of writes waits on the loop rather than parking pool threads; those locks
    are dropped when nobody holds them, so memory follows the cache size, not the number
    of scopes ever touched.

Reads
    A scope's second retrieval through SQL reads all its active rows into a ``ScopeView``
    (``sqlite_view.py``) when the store-wide budget ``cache_rows`` has room (dropping the
    views of the least recently used scopes if need be). From then on a retrieval is
    answered on the event loop, without a trip to a thread: the view's term index finds
    exactly the rows the FTS prefilter would hand the engine, with the scope's statistics
    (``postings.py``), and the engine ranks them (``engine.rank_covered``). A query whose
    ranking would read more than ``LOOP_WORK`` postings is ranked from the view on the read
    pool instead, so a heavy query never holds the loop. It falls back to SQL when the
    view may be stale. Staleness is decided by the
    ``generation`` counter that every transaction changing rows increments (this store's,
    another store's, another process's; usage bumps do not count): the view remembers the
    generation it was read at, and the event loop reads the current one on a connection
    of its own (once per scope per loop iteration, see ``_current_epoch``). A change made
    through this store drops the view as its transaction begins; a write that committed
    with nobody else writing in between then carries it on (``_plan_carry`` on the write
    pool, ``_apply_carry`` on the loop) rather than leave it to be rebuilt. The view holds
    the usage bumps too: every retrieval applies its bumps to the view as it adds them to
    the pending set. Use counts added by *other* processes' retrievals reach the view only with the
    next change.

    A retrieval through SQL does not take the writer lock (unless a write to its scope is
    running or queued: then it waits on the loop with it). Under the connection's lock it
    reads every row holding a prefilter term (``HITS_SQL``: what ranking needs of them, not
    the whole row) and the scope's statistics from FTS5's ``fts5vocab``, applies the usage
    bumps still pending from concurrent retrievals of the scope, ranks, reads the few rows
    it keeps in full, and adds its own bumps to the pending set. The rows come with the
    terms the FTS index holds for them (the engine's own, space-joined), so ranking splits
    a string instead of running the analyzer over every candidate.

    Usage bumps are saved in the background. A retrieval (from a view or through SQL)
    returns as soon as its bumps are pending; the first bump of a scope schedules a save
    ``usage_flush_ms`` later (a second by default), which commits every bump pending by
    then in one transaction and one ``UPDATE`` (on the event loop when it can and the save
    is small, else on the write pool). Nothing in this store reads around them: every
    retrieval and listing applies the pending bumps to the rows it reads, so each sees the
    bumps of every retrieval that returned before it (and of concurrent ones ranked before
    it), and a write, forget or sweep commits them at the start of its own transaction.
    ``flush`` saves them at once, ``close`` saves them too.

Disk
    Superseded, evicted and swept rows keep their text for ``retention_days``, then a write
    transaction purges them (at most ``_PURGE_ROWS`` per write, oldest death first). A
    forgotten row is scrubbed in its own transaction and kept. Every connection runs with
    ``secure_delete`` on, and a forget truncates the WAL, so forgotten text is in no file.
    ``max_scopes`` bounds the scope files of the directory (``ScopeLimitReached``).

Durability
    WAL journal; ``synchronous`` FULL by default (configurable). A write batch, a forget and
    a sweep are each one ``BEGIN IMMEDIATE`` transaction: all of it commits or none of it
    does. Usage bumps are saved within ``usage_flush_ms`` of their retrieval (see Reads),
    committed at NORMAL when the store runs at FULL or EXTRA. A process killed outright
    loses the use counts of its last ``usage_flush_ms``, and a power cut may lose the last
    few saved ones until the next acknowledged write syncs the log; never a record. Other
    processes reading the files see a use count once it is saved.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import hashlib
import json
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import attrs

from scopemem.core import engine
from scopemem.core.ranking import Ranking
from scopemem.core.records import (
    DEFAULT_RETENTION_DAYS,
    DEFAULT_SCOPE_CAP,
    MAX_BATCH,
    Candidate,
    Kind,
    Record,
    Status,
    SweepResult,
    WriteCounts,
    trusted_record,
)
from scopemem.core.text import normalize_text
from scopemem.core.words import PLAIN, Analyzer
from scopemem.errors import ConfigError, ScopeLimitReached, StoreBusy, StoreError
from scopemem.plugins.markers import hookimpl
from scopemem.stores import sqlite_schema as schema
from scopemem.stores.base import (
    DEFAULT_RANKING,
    Clock,
    Hit,
    StoreSettings,
    check_cap,
    check_retention_days,
    check_scope_key,
    fit_batch,
    retention_cutoff,
    wall_clock_ms,
)
from scopemem.stores.sqlite_view import ScopeView

__all__ = ["SYNCHRONOUS_LEVELS", "SqliteStore", "fts_tokens", "scope_file_name"]

log = logging.getLogger("scopemem.stores.sqlite")

T = TypeVar("T")

DEFAULT_PATH = "./scopemem-data"
SYNCHRONOUS_LEVELS = ("off", "normal", "full", "extra")
FILE_SUFFIX = ".db"
_READABLE_CHARS = 40
_DIGEST_CHARS = 32
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
# Threads per pool (one pool for reads, one for writes). More threads than cores only adds
# GIL hand-offs (apsw releases the GIL on every row): on two cores, two read threads served
# 14-24% more worker reads than four did.
_POOL_THREADS = max(2, min(4, os.cpu_count() or 2))
# Rows changed per statement when a whole set is retired (eviction, sweep).
_CHUNK = 500
# The most dead rows past the retention one write transaction purges: twice what a full
# batch can retire (a supersede and an eviction per candidate), so the purge keeps up with
# any steady stream of writes and a backlog (after an upgrade, a long pause, a cap lowered)
# drains over the next writes instead of in one long transaction.
_PURGE_ROWS = 2 * 2 * MAX_BATCH
# Active rows held in memory across all scopes for answering retrievals on the event loop
# (about 1.5 KB each). A scope gets its view on its second retrieval through SQL.
DEFAULT_CACHE_ROWS = 50_000
_VIEW_AFTER_RETRIEVALS = 2
# SQLite's default auto-checkpoint size, set explicitly on every connection: bump commits on
# the event loop checkpoint at the same size, on the pool (see _commit_on_loop).
_WAL_AUTOCHECKPOINT_PAGES = 1000
# How long a bump commit keeps trying the event loop while a pool thread holds the scope's
# connection (a retrieval through SQL takes a millisecond or two) before queuing on the pool.
_LOOP_COMMIT_PATIENCE = 0.05
# The most rows a save updates on the event loop (about 4 ms of it); a larger one runs on
# the write pool, so a big scope read hard never stalls the loop for long.
_LOOP_SAVE_ROWS = 400
# How long after a retrieval its usage bumps are saved, at most. A save costs about 10 us
# per row it updates, and a row retrieved many times in one window is updated once. Under
# 32 concurrent clients over eight scopes of 300 records, saving every 50 ms served about
# half again as many retrievals as a commit per retrieval that the retrieval waited for,
# and saving every second about a fifth more than that. What it risks is only that: a
# process killed outright loses the use counts of its last second (never a record).
DEFAULT_USAGE_FLUSH_MS = 1000
USAGE_FLUSH_MS_MAX = 60_000


# The retrieval prefilter: every active row holding one of the query's prefilter terms, with
# what ranking reads of it (seq, thread key, created, last used, status, the indexed terms),
# not the whole row: the engine ranks these, and only the few it keeps are read in full.
# CROSS JOIN pins the plan: the hits drive primary-key lookups into ``records``.
HITS_SQL = (
    f"SELECT seq, source_thread_key, created_at, last_used_at, status, {schema.HIT_TOKENS}"
    " FROM (SELECT rowid AS hit FROM records_fts WHERE records_fts MATCH ?)"
    " CROSS JOIN records ON seq = hit"
)
# The statistics weighing reads: the scope's active records (the index holds exactly those)
# and how many hold each term, from FTS5's own vocabulary table.
ACTIVE_COUNT_SQL = "SELECT count(*) FROM records WHERE status = 'active'"
VOCAB_TABLE_SQL = ("CREATE VIRTUAL TABLE IF NOT EXISTS temp.records_vocab"
                   " USING fts5vocab(main, records_fts, row)")
# The token index is an FTS5 b-tree forest: every write transaction adds a segment and FTS5
# merges them only in bulk now and then, and a query pays for every segment it must search
# (six segments make a small scope's lookup about seven times slower than one). After each
# write transaction the store counts segments (FTS5 data rowids carry the segment id above
# bit 37, the documented on-disk layout) and rebuilds the index into one segment when there
# are more than this many. Only speed depends on it, never an answer.
MAX_FTS_SEGMENTS = 4
FTS_SEGMENTS_SQL = ("SELECT count(DISTINCT id >> 37) FROM records_fts_data"
                    " WHERE id >= (1 << 37)")


def _apsw() -> Any:
    import apsw  # deferred: listing plugins must not pay for loading SQLite

    return apsw


def scope_file_name(scope_key: str) -> str:
    """The database file name for a scope key: a readable prefix and a digest of the key."""
    digest = hashlib.sha256(scope_key.encode("utf-8")).hexdigest()[:_DIGEST_CHARS]
    readable = _UNSAFE.sub("_", scope_key).strip("_-")[:_READABLE_CHARS].rstrip("_-")
    return f"{readable or 'scope'}-{digest}{FILE_SUFFIX}"


def fts_tokens(text: str, keywords: Sequence[str], analyzer: Analyzer = PLAIN) -> str:
    """What the full-text index holds for a record: the engine's terms of its text and of
    its keywords (``Analyzer.terms``), space-joined, so a term matches in FTS exactly when
    the engine's gate says the record holds it."""
    terms = analyzer.terms(text)
    for keyword in keywords:
        terms.extend(analyzer.terms(keyword))
    return " ".join(terms)


def _match_expression(tokens: Sequence[str]) -> str:
    # Terms are runs of letters, digits and marks, never a quote, so a quoted term is a
    # plain term: no operator, column filter or prefix syntax in the user's text can reach
    # the FTS5 parser.
    return " OR ".join(f'"{token}"' for token in tokens)


def _record(row: Sequence[Any]) -> Record:
    """The record of a row of ``RECORD_COLUMNS`` (columns after those are ignored)."""
    keywords = row[5]
    return trusted_record(*row[1:5], json.loads(keywords) if keywords != "[]" else (),
                          *row[6:16])


def _bumped(row: Sequence[Any], now: int) -> Record:
    """``engine.bump_usage(_record(row), now)`` without building the record twice."""
    keywords = row[5]
    return trusted_record(*row[1:5], json.loads(keywords) if keywords != "[]" else (),
                          *row[6:9], now, row[10] + 1, *row[11:16])


def _with_bumps(rows: Sequence[Sequence[Any]], pending: Mapping[int, list[int]]
                ) -> list[Sequence[Any]]:
    """Rows as they will be once the pending usage bumps are saved (see ``_BUMP_SQL``)."""
    out: list[Sequence[Any]] = []
    for row in rows:
        bump = pending.get(row[0])
        if bump is not None:
            last = row[9]
            row = (*row[:9], bump[1] if last is None or bump[1] > last else last,
                   row[10] + bump[0], *row[11:])
        out.append(row)
    return out


# One statement for a whole save, whatever the number of rows or of retrievals in it: each
# row's bump is bound as [seq, uses, last use] in one JSON array. So a save costs one
# statement and a few microseconds per row, where a statement per retrieval's bumps cost
# some tens of microseconds each, and a longer window would only have added statements.
# A last use never moves back: bumps are saved a little after their retrieval, and another
# process may have used (or restated) the row in between.
_BUMP_SQL = (
    "UPDATE records SET use_count = use_count + bump.uses,"
    " last_used_at = max(ifnull(last_used_at, 0), bump.last)"
    " FROM (SELECT value ->> 0 AS seq, value ->> 1 AS uses, value ->> 2 AS last"
    " FROM json_each(?)) AS bump WHERE records.seq = bump.seq"
)


def _apply_bumps(conn: Any, pending: Mapping[int, list[int]]) -> None:
    """Persist pending usage bumps, of any number of rows and retrievals, in one
    parameterized ``UPDATE`` (never a statement per row, nor per retrieval)."""
    conn.execute(_BUMP_SQL, (json.dumps([[seq, uses, last]
                                         for seq, (uses, last) in pending.items()]),))


def _hit_entries(rows: Sequence[Sequence[Any]], pending: Mapping[int, list[int]]
                 ) -> list[tuple[int, frozenset[str], str, int, int]]:
    """What ``engine.rank_entries`` needs of each active row of ``HITS_SQL``: (seq, the
    indexed terms, thread key, last touched with the pending bumps applied, seq)."""
    entries = []
    for seq, thread, created_at, last_used_at, status, tokens in rows:
        if status != "active":
            continue
        bump = pending.get(seq)
        if bump is not None and (last_used_at is None or bump[1] > last_used_at):
            last_used_at = bump[1]
        entries.append((seq, frozenset(tokens.split()), thread,
                        created_at if last_used_at is None else last_used_at, seq))
    return entries


def _rows_by_seq(conn: Any, seqs: Sequence[int]) -> list[Sequence[Any]]:
    rows: list[Sequence[Any]] = []
    for start in range(0, len(seqs), _CHUNK):
        chunk = seqs[start:start + _CHUNK]
        rows.extend(conn.execute(
            f"SELECT {schema.RECORD_COLUMNS} FROM records"
            f" WHERE seq IN ({', '.join('?' * len(chunk))}) ORDER BY seq", chunk))
    return rows


def _seq_of(scope_key: str, record_id: object) -> int | None:
    """The sequence number ``record_id`` would have in this scope, or None when it cannot be
    one of this scope's ids (another scope's, malformed, not a string)."""
    prefix = f"mem:{scope_key}:"
    if not isinstance(record_id, str) or not record_id.startswith(prefix):
        return None
    digits = record_id[len(prefix):]
    if not digits.isascii() or not digits.isdigit() or len(digits) > 18:
        return None
    return int(digits)


def _check_synchronous(value: object, name: str) -> str:
    if not isinstance(value, str) or value.lower() not in SYNCHRONOUS_LEVELS:
        raise ConfigError(f"{name}: must be one of {', '.join(SYNCHRONOUS_LEVELS)};"
                          f" got {value!r}")
    return value.lower()


def _check_int(value: object, name: str, minimum: int, maximum: int | None = None) -> int:
    if (isinstance(value, bool) or not isinstance(value, int) or value < minimum
            or (maximum is not None and value > maximum)):
        bound = (f"from {minimum} to {maximum}" if maximum is not None
                 else f"of at least {minimum}")
        raise ConfigError(f"{name}: must be an integer {bound}; got {value!r}")
    return value


def _check_path(value: object, name: str) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ConfigError(f"{name}: must be a non-empty directory path; got {value!r}")
    return value


#: How much ranking work (postings read: the query terms' document frequencies summed) a
#: retrieval may do on the event loop; past it the ranking runs on the read pool. About a
#: millisecond of work: a light brief reads tens or hundreds of postings, while 24 common
#: words over 10,000 matching rows read 240,000 (about 25 ms that would hold every other
#: client's request).
LOOP_WORK = 20_000


@attrs.frozen
class _Carry:
    """What a write read to carry its scope's view on (``SqliteStore._plan_carry``)."""

    view: ScopeView
    rows: list[Sequence[Any]]
    gone: set[int]
    removed_terms: dict[int, list[str]]
    generation: int


@attrs.frozen
class _Heavy:
    """A view that can answer, but not on the loop."""

    handle: Any
    view: ScopeView


class _Handle:
    """One cached connection and the lock that keeps it to one thread at a time."""

    __slots__ = ("bump_lock", "carry", "checkpoint", "closed", "conn", "flush", "lock",
                 "path", "pending", "probe", "probe_lock", "probed", "retrievals", "view",
                 "view_refused")

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.conn: Any = None
        self.closed = False
        # Usage bumps of retrievals, not committed yet: seq → [uses, last use]. A
        # transaction takes the whole dict as its batch and applies it first. ``bump_lock``
        # guards it and ``view`` (never held across I/O: the event loop takes it too).
        self.bump_lock = threading.Lock()
        self.pending: dict[int, list[int]] = {}
        # The save of the pending bumps that is scheduled or under way (see _flush_soon).
        self.flush: asyncio.Task[None] | None = None
        # The scope's active rows in memory (None until built, and again after any change to
        # the rows), and the read-only connection the event loop checks its generation on.
        self.view: ScopeView | None = None
        self.view_refused = False  # too large for the cache when last tried
        self.retrievals = 0  # through SQL, since the handle opened
        self.probe: Any = None
        self.probe_lock = threading.Lock()
        self.probed: tuple[object, int] | None = None  # (epoch, generation read in it)
        self.checkpoint: asyncio.Task[None] | None = None  # queued by _commit_on_loop
        # What a write read for carrying the view on (see _plan_carry), applied on the loop.
        self.carry: _Carry | None = None

    def add_bumps(self, seqs: Sequence[int], now: int) -> bool:
        """Count one use of each row at ``now``; False (nothing counted) when the handle is
        closed: its last commit may be done."""
        with self.bump_lock:
            if self.closed:
                return False
            pending = self.pending
            for seq in seqs:
                bump = pending.get(seq)
                if bump is None:
                    pending[seq] = [1, now]
                else:
                    bump[0] += 1
                    bump[1] = now
            if self.view is not None:
                self.view.bump(dict.fromkeys(seqs, (1, now)))
            return True

    def pending_copy(self) -> dict[int, list[int]]:
        with self.bump_lock:
            return {seq: list(bump) for seq, bump in self.pending.items()}

    def take_batch(self) -> dict[int, list[int]]:
        """The pending bumps, now a batch of their own (the caller commits or returns it)."""
        with self.bump_lock:
            batch = self.pending
            self.pending = {}
            return batch

    def return_batch(self, batch: Mapping[int, list[int]]) -> None:
        """A batch whose transaction failed: its bumps are pending again."""
        with self.bump_lock:
            pending = self.pending
            for seq, (uses, last) in batch.items():
                bump = pending.get(seq)
                if bump is None:
                    pending[seq] = [uses, last]
                else:
                    bump[0] += uses
                    bump[1] = max(bump[1], last)

    def drop_view(self, view: ScopeView | None = None) -> ScopeView | None:
        """Forget the view (only if it is still ``view``, when given); the view dropped."""
        with self.bump_lock:
            current = self.view
            if current is None or (view is not None and current is not view):
                return None
            self.view = None
            return current


class SqliteStore:
    """Durable memory: one SQLite database per scope key under ``path``."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        cap: int = DEFAULT_SCOPE_CAP,
        clock: Clock = wall_clock_ms,
        synchronous: str = "full",
        busy_timeout_ms: int = 5000,
        max_open: int | None = None,
        cache_rows: int = DEFAULT_CACHE_ROWS,
        usage_flush_ms: int = DEFAULT_USAGE_FLUSH_MS,
        ranking: Ranking = DEFAULT_RANKING,
        retention_days: int = DEFAULT_RETENTION_DAYS,
        max_scopes: int = 0,
    ) -> None:
        self.cap = check_cap(cap)
        self.retention_days = check_retention_days(retention_days)
        self.max_scopes = _check_int(max_scopes, "max_scopes", 0)
        # Database files in the directory, counted once when a limit applies and kept up to
        # date by this store's own creations (see _reserve_scope); None until counted.
        self._scope_files: int | None = None
        self.ranking = ranking
        self.analyzer = ranking.analyzer
        self.directory = os.path.abspath(os.path.expanduser(_check_path(path, "path")))
        self.synchronous = _check_synchronous(synchronous, "synchronous")
        self.busy_timeout_ms = _check_int(busy_timeout_ms, "busy_timeout_ms", 0)
        self.max_open = (default_max_open() if max_open is None
                         else _check_int(max_open, "max_open", 1))
        self.cache_rows = _check_int(cache_rows, "cache_rows", 0)
        self.usage_flush_ms = _check_int(usage_flush_ms, "usage_flush_ms", 0,
                                         USAGE_FLUSH_MS_MAX)
        self._cached_rows = 0  # rows held by views, across scopes (guarded by _cache_lock)
        # Files whose token index this store has checked against their rows: once per file
        # per store, not on every reopen from the cache of open files.
        self._reconciled: set[str] = set()
        self._clock = clock
        self._handles: OrderedDict[str, _Handle] = OrderedDict()
        self._closing: dict[str, _Handle] = {}  # evicted from the cache, not closed yet
        self._cache_lock = threading.Lock()
        self._writers: dict[str, list[Any]] = {}  # scope → [asyncio.Lock, holders+waiters]
        self._executors: dict[str, ThreadPoolExecutor] = {}  # "read" / "write" pools
        self._epoch: object | None = None  # see _current_epoch
        self._epoch_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @classmethod
    def from_settings(cls, settings: StoreSettings) -> SqliteStore:
        """Build from ``[memory.stores.sqlite]``: ``path``, ``synchronous``,
        ``busy_timeout_ms``, ``max_open_connections``, ``cache_rows``, ``usage_flush_ms``,
        ``max_scopes``."""
        settings = settings.named("sqlite")
        settings.unknown_options(("path", "synchronous", "busy_timeout_ms",
                                  "max_open_connections", "cache_rows", "usage_flush_ms",
                                  "max_scopes"))
        return cls(
            settings.record("path", _check_path(settings.options.get("path", DEFAULT_PATH),
                                                settings.option_key("path"))),
            cap=settings.cap,
            clock=settings.clock,
            synchronous=settings.choice_option("synchronous", "full", SYNCHRONOUS_LEVELS),
            busy_timeout_ms=settings.int_option("busy_timeout_ms", 5000, 0),
            max_open=settings.int_option("max_open_connections", default_max_open(), 1),
            cache_rows=settings.int_option("cache_rows", DEFAULT_CACHE_ROWS, 0),
            usage_flush_ms=settings.int_option("usage_flush_ms", DEFAULT_USAGE_FLUSH_MS, 0,
                                               USAGE_FLUSH_MS_MAX),
            ranking=settings.ranking,
            retention_days=settings.retention_days,
            max_scopes=settings.int_option("max_scopes", 0, 0),
        )

    # --- the MemoryStore methods -----------------------------------------------------------

    async def retrieve(self, scope_key: str, query: str, limit: int) -> list[Record]:
        return [hit.record for hit in await self.search(scope_key, query, limit)]

    async def search(self, scope_key: str, query: str, limit: int, *, bump: bool = True
                     ) -> list[Hit]:
        check_scope_key(scope_key)
        now = self._clock()
        terms = engine.query_terms(query, self.analyzer)
        if not terms.terms or limit <= 0:
            return []
        answered = self._from_view(scope_key, terms, limit, now, bump)
        if isinstance(answered, _Heavy):
            # Too much ranking for the event loop: the same work on a pool thread, so light
            # queries on other scopes are answered meanwhile.
            view = answered.view
            view.readers += 1  # on the loop only: a carry never changes it meanwhile
            try:
                ranked = await self._run("read", self._rank_view, view, terms, limit, now)
            finally:
                view.readers -= 1
            answered = self._view_answer(answered.handle, ranked, bump, now)
        if answered is None:
            entry = self._writers.get(scope_key)
            if entry is not None and entry[0].locked():
                # A write to this scope is running or queued: wait on the loop with it
                # rather than park read threads on its connection for the length of its
                # transaction.
                async with self._writer(scope_key):
                    answered = await self._run(
                        "read", self._retrieve, scope_key, terms, limit, now, bump)
            else:
                answered = await self._run(
                    "read", self._retrieve, scope_key, terms, limit, now, bump)
        hits, bumped = answered
        if bumped is not None:
            self._flush_soon(scope_key, bumped)
        return hits

    async def mark_used(self, used: Mapping[str, Sequence[str]]) -> int:
        now = self._clock()
        marked = 0
        for scope_key, ids in used.items():
            check_scope_key(scope_key)
            seqs = sorted({seq for seq in (_seq_of(scope_key, record_id) for record_id in ids)
                           if seq is not None})
            if not seqs:
                continue
            count, handle = await self._run("read", self._mark, scope_key, seqs, now)
            marked += count
            if handle is not None:
                self._flush_soon(scope_key, handle)
        return marked

    async def write(
        self, scope_key: str, candidates: Sequence[Candidate], cap: int | None = None
    ) -> WriteCounts:
        check_scope_key(scope_key)
        cap = self.cap if cap is None else check_cap(cap)
        if not candidates:
            return WriteCounts()
        now = self._clock()
        batch = fit_batch(candidates)
        async with self._writer(scope_key):
            counts = await self._run("write", self._write, scope_key, batch, cap, now)
            self._apply_carry(scope_key)
            return counts

    async def list(
        self, scope_key: str, limit: int, query: str | None = None, kind: Kind | None = None
    ) -> list[Record]:
        check_scope_key(scope_key)
        if limit <= 0:
            return []
        tokens: list[str] | None = None
        if query is not None:
            tokens = list(engine.query_terms(query, self.analyzer).prefilter)
            if not tokens:
                return []
        return await self._run("read", self._list, scope_key, limit, query, tokens, kind)

    async def forget(self, scope_key: str, record_id: str) -> bool:
        check_scope_key(scope_key)
        seq = _seq_of(scope_key, record_id)
        if seq is None:
            return False
        async with self._writer(scope_key):
            return await self._run("write", self._forget, scope_key, record_id, seq,
                                   self._clock())

    async def sweep(self, scope_key: str, dry_run: bool = False) -> SweepResult:
        check_scope_key(scope_key)
        async with self._writer(scope_key):
            return await self._run("write", self._sweep, scope_key, dry_run, self._clock())

    async def flush(self) -> None:
        """Save every use count still pending now, instead of within ``usage_flush_ms``
        (``close`` saves them too). For a backup or a copy of the files taken while the
        store runs. Raises ``StoreError`` when a scope's counts cannot be saved."""
        with self._cache_lock:
            handles = list(self._handles.items())
        for scope_key, handle in handles:
            await self._save_bumps(scope_key, handle)

    async def close(self) -> None:
        """Close every connection (saving the use counts still pending) and stop the thread
        pools. Safe to call twice."""
        with self._cache_lock:
            if self._closed:
                return
            self._closed = True
            handles = list(self._handles.values())
            self._handles.clear()
        loop = asyncio.get_running_loop()
        for handle in handles:
            # Closing saves the pending bumps itself; a save scheduled in another loop
            # (one that has stopped) never runs again.
            if handle.flush is not None and handle.flush.get_loop() is loop:
                handle.flush.cancel()
        executors, self._executors = self._executors, {}
        if not executors:
            for handle in handles:
                self._close_handle(handle, final=True)
            return
        # Closing waits for operations already running on a connection to finish.
        executor = executors.get("write") or next(iter(executors.values()))
        await asyncio.get_running_loop().run_in_executor(
            executor, lambda: [self._close_handle(handle, final=True) for handle in handles])
        for pool in executors.values():
            pool.shutdown(wait=False)

    # --- work done on the pool ------------------------------------------------------------

    def _retrieve(self, scope_key: str, terms: engine.QueryTerms, limit: int, now: int,
                  bump: bool) -> tuple[list[Hit], _Handle | None]:
        """The ranked records with their matches, bumped when ``bump``, and the handle now
        holding their pending bumps (None when nothing was bumped). Builds the scope's view
        on its second retrieval, so the next ones are answered by ``_from_view``."""
        with self._connection(scope_key, create=False) as handle:
            if handle is None:
                return [], None
            conn = handle.conn
            with self._snapshot(conn):  # the statistics and the hits they count, together
                rows = conn.execute(HITS_SQL, (_match_expression(terms.prefilter),)).fetchall()
                stats = self._stats(conn, terms) if rows else None
            pending = handle.pending_copy()
            ranked = engine.rank_entries(_hit_entries(rows, pending), terms, stats, limit,
                                         now, self.ranking)
            full = {row[0]: row for row in _rows_by_seq(conn, [seq for seq, _m in ranked])}
            if pending:
                full = {row[0]: row for row in _with_bumps(list(full.values()), pending)}
            handle.retrievals += 1
            # The handle is held, so it cannot close meanwhile and the bumps are counted.
            bumped = handle if bump and ranked and handle.add_bumps(
                [seq for seq, _m in ranked], now) else None
            if handle.view is None and handle.retrievals >= _VIEW_AFTER_RETRIEVALS:
                self._build_view(handle)
        if bump:
            return [Hit(_bumped(full[seq], now), match) for seq, match in ranked], bumped
        return [Hit(_record(full[seq]), match) for seq, match in ranked], None

    @staticmethod
    def _stats(conn: Any, terms: engine.QueryTerms) -> engine.ScopeStats:
        count = conn.execute(ACTIVE_COUNT_SQL).fetchall()[0][0]
        frequency: dict[str, int] = {}
        words = list(terms.terms)
        for start in range(0, len(words), _CHUNK):
            chunk = words[start:start + _CHUNK]
            frequency.update(conn.execute(
                f"SELECT term, doc FROM temp.records_vocab"
                f" WHERE term IN ({', '.join('?' * len(chunk))})", chunk).fetchall())
        return engine.ScopeStats(count, frequency)

    def _mark(self, scope_key: str, seqs: Sequence[int], now: int
              ) -> tuple[int, _Handle | None]:
        """Count a use of each of ``seqs`` that is an active row; how many, and the handle
        holding the bumps."""
        with self._connection(scope_key, create=False) as handle:
            if handle is None:
                return 0, None
            active = [seq for (seq,) in (row for start in range(0, len(seqs), _CHUNK)
                                          for row in handle.conn.execute(
                f"SELECT seq FROM records WHERE status = 'active' AND seq IN"
                f" ({', '.join('?' * len(seqs[start:start + _CHUNK]))})",
                seqs[start:start + _CHUNK]))]
            if not active or not handle.add_bumps(active, now):
                return 0, None
            return len(active), handle

    def _write(self, scope_key: str, candidates: list[Candidate], cap: int, now: int
               ) -> WriteCounts:
        with self._connection(scope_key, create=True) as handle:
            old_view = handle.view  # the transaction drops it; the write may carry it on
            changed: set[int] = set()
            retired: list[Record] = []
            with self._transaction(handle.conn, bumps=handle, applied=changed):
                generation = (None if old_view is None else
                              handle.conn.execute(schema.GENERATION_SQL).fetchall()[0][0])
                counts, evicted = self._write_rows(handle.conn, scope_key, candidates, cap,
                                                   now, changed, retired)
            if old_view is not None and generation is not None \
                    and old_view.generation == generation:
                handle.carry = self._plan_carry(handle, old_view, changed, retired,
                                                generation + 1)
        # No log line of its own: the counts say what was evicted, the Worker logs the
        # eviction for a served store and Memory's [memory] line counts it for an embedded one.
        return counts + WriteCounts(evicted=len(evicted))

    def _write_rows(self, conn: Any, scope_key: str, candidates: list[Candidate], cap: int,
                    now: int, changed: set[int], retired: list[Record]
                    ) -> tuple[WriteCounts, list[Record]]:
        """The batch's statements, inside the write's transaction; ``changed`` gathers the
        seqs of rows inserted or updated, ``retired`` the records that left."""
        seq = conn.execute(schema.NEXT_SEQ_SQL).fetchall()[0][0]
        counts = WriteCounts()
        for candidate in candidates:
            pool = self._pool_for(conn, scope_key, candidate)
            action = engine.plan_write(scope_key, candidate, pool, now)
            counts += engine.count_action(action, candidate)
            if isinstance(action, engine.Insert):
                if action.superseded is not None:
                    self._retire(conn, scope_key, [action.superseded], now)
                    retired.append(action.superseded)
                self._insert(conn, engine.mint_record(scope_key, seq, candidate, now), seq)
                changed.add(seq)
                seq += 1
            else:
                updated = action.updated
                updated_seq = _seq_of(scope_key, updated.id)
                conn.execute(
                    "UPDATE records SET use_count = ?, last_used_at = ?, confidence = ?"
                    " WHERE seq = ?",
                    (updated.use_count, updated.last_used_at, updated.confidence,
                     updated_seq),
                )
                if updated_seq is not None:
                    changed.add(updated_seq)
        evicted: list[Record] = []
        active = conn.execute(
            "SELECT count(*) FROM records WHERE status = 'active'").fetchall()[0][0]
        if active > cap:
            evicted = self._plan_eviction(conn, active - cap)
            self._retire(conn, scope_key, evicted, now)
            retired.extend(evicted)
        self._purge(conn, retention_cutoff(now, self.retention_days))
        self._compact_index(conn)
        return counts, evicted

    @staticmethod
    def _plan_eviction(conn: Any, excess: int) -> list[Record]:
        """The ``excess`` records the engine evicts, read without loading the whole scope.

        The engine retires the least recently used first: last use, else creation, then
        creation, then sequence number. Within the never-used rows that order is (creation,
        seq); within the used ones it is (last use, creation, seq); so the ``excess`` first
        rows overall are among the ``excess`` first of each group. Those two short lists,
        read from the covering ``(status, last_used_at, created_at)`` index, are all the
        engine is handed, and ``plan_eviction`` chooses among them."""
        seqs: set[int] = set()
        for condition, order in (("last_used_at IS NULL", "created_at, seq"),
                                 ("last_used_at IS NOT NULL", "last_used_at, created_at, seq")):
            seqs.update(seq for (seq,) in conn.execute(
                f"SELECT seq FROM records WHERE status = 'active' AND {condition}"
                f" ORDER BY {order} LIMIT ?", (excess,)))
        records = [_record(row) for row in _rows_by_seq(conn, sorted(seqs))]
        return engine.plan_eviction(records, len(records) - excess)

    def _pool_for(self, conn: Any, scope_key: str, candidate: Candidate) -> list[Record]:
        """The only rows ``plan_write`` reads for this candidate: the active rows named by its
        pointers and, without a supersede pointer, the active rows sharing its text."""
        rows: dict[int, Sequence[Any]] = {}
        for pointer in (candidate.restates, candidate.supersedes):
            seq = _seq_of(scope_key, pointer) if pointer else None
            if seq is not None:
                for row in conn.execute(
                        f"SELECT {schema.RECORD_COLUMNS} FROM records"
                        " WHERE seq = ? AND id = ? AND status = 'active'", (seq, pointer)):
                    rows[row[0]] = row
        if not candidate.supersedes:
            for row in conn.execute(
                    f"SELECT {schema.RECORD_COLUMNS} FROM records"
                    " WHERE status = 'active' AND norm = ? ORDER BY seq",
                    (normalize_text(candidate.text),)):
                rows[row[0]] = row
        return [_record(rows[seq]) for seq in sorted(rows)]

    def _insert(self, conn: Any, record: Record, seq: int) -> None:
        conn.execute(
            "INSERT INTO records (seq, id, scope_key, kind, text, norm, keywords,"
            " source_thread_key, source_run_id, created_at, last_used_at, use_count,"
            " confidence, supersedes, restates, status, source)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (seq, record.id, record.scope_key, record.kind.value, record.text,
             normalize_text(record.text), json.dumps(list(record.keywords), ensure_ascii=False),
             record.source_thread_key, record.source_run_id, record.created_at,
             record.last_used_at, record.use_count, record.confidence, record.supersedes,
             record.restates, record.status.value, record.source.value),
        )
        conn.execute("INSERT INTO records_fts (rowid, tokens) VALUES (?, ?)",
                     (seq, fts_tokens(record.text, record.keywords, self.analyzer)))

    @staticmethod
    def _retire(conn: Any, scope_key: str, records: Sequence[Record], now: int) -> None:
        """Persist soft deletes: the new status and when it died, and the row leaves the
        full-text index in the same transaction."""
        by_status: dict[Status, list[int]] = {}
        for record in records:
            seq = _seq_of(scope_key, record.id)
            if seq is not None:
                by_status.setdefault(record.status, []).append(seq)
        for status, seqs in by_status.items():
            for start in range(0, len(seqs), _CHUNK):
                chunk = seqs[start:start + _CHUNK]
                marks = ", ".join("?" * len(chunk))
                conn.execute(f"UPDATE records SET status = ?, retired_at = ?"
                             f" WHERE seq IN ({marks})", (status.value, now, *chunk))
                conn.execute(f"DELETE FROM records_fts WHERE rowid IN ({marks})", chunk)

    @staticmethod
    def _purge(conn: Any, cutoff: int) -> int:
        """Delete up to ``_PURGE_ROWS`` superseded, evicted and swept rows that died at
        ``cutoff`` or before, oldest death first; how many. None of them is in the token
        index. The highest seq is recorded first, so ids are never reused."""
        seqs = [seq for (seq,) in conn.execute(
            # Pinned to the partial index: read in death order, the scan stops at the first
            # row too young or at the limit, however many dead rows the retention keeps.
            f"SELECT seq FROM records INDEXED BY records_dead"
            f" WHERE status IN {schema.PURGEABLE_STATUSES}"
            " AND retired_at <= ? ORDER BY retired_at LIMIT ?", (cutoff, _PURGE_ROWS))]
        if not seqs:
            return 0
        last = conn.execute(schema.NEXT_SEQ_SQL).fetchall()[0][0] - 1
        schema.set_meta(conn, schema.META_LAST_SEQ, str(last))
        for start in range(0, len(seqs), _CHUNK):
            chunk = seqs[start:start + _CHUNK]
            conn.execute(f"DELETE FROM records WHERE seq IN ({', '.join('?' * len(chunk))})",
                         chunk)
        return len(seqs)

    def _list(self, scope_key: str, limit: int, query: str | None, tokens: list[str] | None,
              kind: Kind | None) -> list[Record]:
        with self._connection(scope_key, create=False) as handle:
            if handle is None:
                return []
            conn = handle.conn
            where = ["status = 'active'"]
            params: list[Any] = []
            if kind is not None:
                where.append("kind = ?")
                params.append(str(kind))
            if tokens is not None:
                where.append("seq IN (SELECT rowid FROM records_fts WHERE records_fts MATCH ?)")
                params.append(_match_expression(tokens))
            rows = conn.execute(
                f"SELECT {schema.RECORD_COLUMNS} FROM records WHERE {' AND '.join(where)}"
                " ORDER BY seq DESC LIMIT ?", (*params, limit)).fetchall()
            pending = handle.pending_copy()
            if pending:
                rows = _with_bumps(rows, pending)
        # The index and the engine agree by construction; the engine still has the last word.
        return engine.listing([_record(row) for row in rows], limit, query=query, kind=kind,
                              analyzer=self.analyzer)

    def _forget(self, scope_key: str, record_id: str, seq: int, now: int) -> bool:
        """Retire the row as forgotten and scrub its text, dedup key and keywords, all in
        one transaction; then merge the token index (so no segment keeps its terms) and
        truncate the WAL (so no old page image keeps its text). ``secure_delete`` zeroes
        what the database file freed."""
        with self._connection(scope_key, create=False) as handle:
            if handle is None:
                return False
            conn = handle.conn
            if not conn.execute("SELECT 1 FROM records WHERE seq = ? AND id = ?"
                                " AND status = 'active'", (seq, record_id)).fetchall():
                return False  # nothing to forget: no transaction, and the view stays
            with self._transaction(conn, bumps=handle):
                conn.execute("UPDATE records SET status = ?, retired_at = ?, text = '',"
                             " norm = '', keywords = '[]' WHERE seq = ? AND id = ?"
                             " AND status = 'active'",
                             (Status.FORGOTTEN.value, now, seq, record_id))
                if not conn.changes():
                    return False
                conn.execute("DELETE FROM records_fts WHERE rowid = ?", (seq,))
                conn.execute("INSERT INTO records_fts (records_fts) VALUES ('optimize')")
            self._truncate_wal(conn, handle.path)
        return True

    @staticmethod
    def _truncate_wal(conn: Any, path: str) -> None:
        """Checkpoint the whole WAL into the database and truncate it to nothing. A reader
        of another process holding an old snapshot past ``busy_timeout_ms`` keeps it from
        finishing: then the log is overwritten by later commits instead, and a warning says
        so. The forget has committed either way, so this never fails it."""
        apsw = _apsw()
        try:
            conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
        except apsw.Error as exc:
            log.warning("sqlite store: %s: the WAL could not be truncated after a forget"
                        " (%s); later commits overwrite it", path, _describe(exc))

    def _commit_pending(self, handle: _Handle) -> None:
        """Commit the handle's pending bumps, if any (a closed handle committed its own)."""
        with handle.lock:
            if handle.closed or not handle.pending:
                return
            try:
                with self._transaction(handle.conn, relaxed=True, bumps=handle):
                    pass
            except _apsw().Error as exc:
                raise StoreError(f"sqlite store: {handle.path}: {_describe(exc)}") from exc

    def _sweep(self, scope_key: str, dry_run: bool, now: int) -> SweepResult:
        with self._connection(scope_key, create=False) as handle:
            if handle is None:
                return SweepResult(swept=0, ids=() if dry_run else None)
            conn = handle.conn
            # A dry run reads and commits only pending use counts: the scope's view stays.
            with self._transaction(conn, bumps=handle, changes_rows=not dry_run):
                rows = conn.execute(
                    f"SELECT {schema.RECORD_COLUMNS} FROM records"
                    " WHERE status = 'active' AND kind = ? ORDER BY seq",
                    (Kind.FACT.value,)).fetchall()
                swept = engine.plan_sweep([_record(row) for row in rows])
                if dry_run:
                    return SweepResult(swept=len(swept), ids=tuple(r.id for r in swept))
                self._retire(conn, scope_key, swept, now)
                self._compact_index(conn)
        return SweepResult(swept=len(swept))

    # --- the in-memory views (see "Reads") -------------------------------------------------

    def _from_view(self, scope_key: str, terms: engine.QueryTerms, limit: int, now: int,
                   bump: bool) -> tuple[list[Hit], _Handle | None] | _Heavy | None:
        """Answer a retrieval from the scope's view, on the event loop, with its bumps added
        when ``bump`` (and the handle holding them, when there are any); None when the view
        cannot answer (there is none, or the rows changed since it was read); ``_Heavy`` when
        the ranking would hold the loop longer than ``LOOP_WORK`` allows."""
        with self._cache_lock:
            handle = self._handles.get(scope_key)
            if handle is None:
                return None
            self._handles.move_to_end(scope_key)
        view = handle.view
        if view is None:
            return None
        epoch = self._current_epoch()
        probed = handle.probed
        if probed is not None and probed[0] is epoch:
            generation: int | None = probed[1]
        else:
            generation = self._probe(handle)
            if generation is None:
                return None
            handle.probed = (epoch, generation)
        if generation != view.generation:
            self._release_view(handle, view)
            return None
        if view.work(terms) > LOOP_WORK:
            return _Heavy(handle, view)
        return self._view_answer(handle, self._rank_view(view, terms, limit, now), bump, now)

    def _rank_view(self, view: ScopeView, terms: engine.QueryTerms, limit: int, now: int
                   ) -> list[tuple[tuple[Any, ...], float]]:
        """The view's ranked rows. Safe on a pool thread: the postings never change, and the
        loop only replaces whole entries (a usage bump), one atomic assignment each."""
        weights = engine.term_weights(terms, view.stats(terms), self.ranking)
        return engine.rank_covered(view.covered(terms, weights), sum(weights), limit, now,
                                   self.ranking, view.continues, view.entries)

    @staticmethod
    def _view_answer(handle: _Handle, ranked: list[tuple[tuple[Any, ...], float]], bump: bool,
                     now: int) -> tuple[list[Hit], _Handle | None] | None:
        """A view's ranked rows as hits, their bumps added when ``bump``; None when the
        handle closed meanwhile (the caller answers through SQL)."""
        if not ranked:
            return [], None
        if not bump:
            return [Hit(trusted_record(*row[1:16]), match) for row, match in ranked], None
        if not handle.add_bumps([row[0] for row, _match in ranked], now):
            return None  # closed meanwhile: answer through SQL on a new handle
        # View rows hold their keywords decoded already.
        return [Hit(trusted_record(*row[1:9], now, row[10] + 1, *row[11:16]), match)
                for row, match in ranked], handle

    def _current_epoch(self) -> object:
        """A token that stays the same until the event loop's next iteration.

        One check of a scope's generation serves every retrieval of that scope in the same
        loop iteration. That loses nothing: a change committed elsewhere can only become
        known here through an event handled in a later iteration (a request arriving, a
        future completing), and the first retrieval after that event checks again. A
        retrieval in the same iteration as the check is concurrent with such a change, and
        may be answered before it."""
        loop = asyncio.get_running_loop()
        if self._epoch is None or self._epoch_loop is not loop:
            self._epoch, self._epoch_loop = object(), loop
            loop.call_soon(self._end_epoch)
        return self._epoch

    def _end_epoch(self) -> None:
        self._epoch = None

    @staticmethod
    def _on_probe(handle: _Handle, read: Callable[[Any], T | None]) -> T | None:
        """``read(probe connection)`` under the probe's lock, or None when that cannot be done
        without waiting (the lock is taken, the probe is gone) or fails: the caller then
        answers through SQL, which reports any real failure."""
        if not handle.probe_lock.acquire(blocking=False):
            return None
        try:
            probe = handle.probe
            return None if probe is None else read(probe)
        except Exception:
            return None
        finally:
            handle.probe_lock.release()

    @staticmethod
    def _probe(handle: _Handle) -> int | None:
        """The scope's generation as committed now, read on the probe connection (which only
        the event loop uses); None when it cannot be read without waiting."""
        return SqliteStore._on_probe(
            handle, lambda probe: probe.execute(schema.GENERATION_SQL).fetchall()[0][0])

    def _build_view(self, handle: _Handle) -> None:
        """Read the scope's active rows into a view, when the cache has room. The caller
        holds the handle, outside any transaction."""
        if self.cache_rows == 0 or handle.view_refused or handle.closed:
            return
        conn = handle.conn
        with self._snapshot(conn):  # the generation and the rows it counts, together
            generation = conn.execute(schema.GENERATION_SQL).fetchall()[0][0]
            count = conn.execute(
                "SELECT count(*) FROM records WHERE status = 'active'").fetchall()[0][0]
            if count > self.cache_rows:
                handle.view_refused = True
                return
            rows = conn.execute(schema.ACTIVE_ROWS_SQL).fetchall()
        view = ScopeView((row if row[16] is not None
                          else (*row[:16], fts_tokens(row[4], json.loads(row[5]),
                                                      self.analyzer))
                          for row in rows), generation)
        if handle.probe is None:
            try:
                probe = _connect(handle.path)
            except _apsw().Error:
                return  # no descriptor to spare, say: this scope is read through SQL
            probe.set_busy_timeout(0)
            with handle.probe_lock:
                handle.probe = probe
        if not self._reserve_rows(handle, len(view)):
            handle.view_refused = True
            return
        with handle.bump_lock:
            view.bump(handle.pending)
            handle.view = view
            handle.probed = None  # a check older than the view must not judge it

    def _plan_carry(self, handle: _Handle, old: ScopeView, changed: set[int],
                    retired: Sequence[Record], generation: int) -> _Carry | None:
        """What the view ``old`` needs to become the view after this store's own committed
        write (at ``generation``: nobody else wrote in between), read here on the write
        pool: the rows the write inserted or updated (and those whose pending use counts it
        committed), and the terms of the rows it retired. ``_apply_carry`` applies it on the
        event loop, instead of leaving the scope to be read through SQL and its view rebuilt
        from every row. The caller holds the handle, outside any transaction."""
        if self.cache_rows == 0 or handle.closed:
            return None
        conn = handle.conn
        gone = {seq for seq in (_seq_of(record.scope_key, record.id) for record in retired)
                if seq is not None}
        removed_terms: dict[int, list[str]] = {}
        for seq in gone:
            entry = old.entries.get(seq)
            if entry is not None:
                row = entry[1]
                removed_terms[seq] = fts_tokens(row[4], row[5], self.analyzer).split()
        seqs = sorted(changed - gone)
        rows: list[Sequence[Any]] = []
        with self._snapshot(conn):
            if conn.execute(schema.GENERATION_SQL).fetchall()[0][0] != generation:
                return None  # another writer came in after the commit: rebuild as usual
            for start in range(0, len(seqs), _CHUNK):
                chunk = seqs[start:start + _CHUNK]
                rows.extend(conn.execute(
                    f"{schema.ACTIVE_ROWS_SQL} AND records.seq IN"
                    f" ({', '.join('?' * len(chunk))})", chunk))
        rows = [row if row[16] is not None
                else (*row[:16], fts_tokens(row[4], json.loads(row[5]), self.analyzer))
                for row in rows]
        return _Carry(old, rows, gone, removed_terms, generation)

    def _apply_carry(self, scope_key: str) -> None:
        """Install the carried view a write planned, on the event loop: in place when no
        ranking on a pool thread reads the old view (a few set operations), else as a copy.
        Nothing happens when a view was built meanwhile, or the handle closed."""
        with self._cache_lock:
            handle = self._handles.get(scope_key)
        if handle is None:
            return
        carry, handle.carry = handle.carry, None
        if carry is None or handle.view is not None or handle.closed:
            return
        old = carry.view
        if old.readers == 0:
            old.carry_in_place(carry.rows, carry.gone, carry.removed_terms, carry.generation)
            view = old
        else:
            view = ScopeView.carried(old, carry.rows, carry.gone, carry.removed_terms,
                                     carry.generation)
        if not self._reserve_rows(handle, len(view)):
            return
        with handle.bump_lock:
            if handle.view is not None or handle.closed:  # built meanwhile, or closing
                with self._cache_lock:
                    self._cached_rows -= len(view)
                return
            view.bump(handle.pending)
            handle.view = view
            handle.probed = None

    def _reserve_rows(self, handle: _Handle, count: int) -> bool:
        """Make room for a view of ``count`` rows, dropping the views of the least recently
        used scopes if need be; False when it cannot fit."""
        with self._cache_lock:
            if count > self.cache_rows:
                return False
            for other in list(self._handles.values()):
                if self._cached_rows + count <= self.cache_rows:
                    break
                if other is not handle:
                    dropped = other.drop_view()
                    if dropped is not None:
                        self._cached_rows -= len(dropped)
            if self._cached_rows + count > self.cache_rows:
                return False
            self._cached_rows += count
            return True

    def _release_view(self, handle: _Handle, view: ScopeView | None = None) -> None:
        dropped = handle.drop_view(view)
        if dropped is not None:
            with self._cache_lock:
                self._cached_rows -= len(dropped)

    # --- plumbing --------------------------------------------------------------------------

    async def _run(self, pool: str, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` on the ``"read"`` or the ``"write"`` pool. Two pools, so a burst of
        writes waiting on the disk never holds the threads reads of other scopes need."""
        loop = asyncio.get_running_loop()
        with self._cache_lock:
            if self._closed:
                raise StoreError("the sqlite store is closed")
            executor = self._executors.get(pool)
            if executor is None:
                executor = self._executors[pool] = ThreadPoolExecutor(
                    _POOL_THREADS, thread_name_prefix=f"scopemem-sqlite-{pool}")
        return await loop.run_in_executor(executor, functools.partial(fn, *args))

    def _flush_soon(self, scope_key: str, handle: _Handle) -> None:
        """Have the handle's pending bumps saved within ``usage_flush_ms``, unless a save is
        scheduled already (it will take these bumps too)."""
        loop = asyncio.get_running_loop()
        flush = handle.flush
        if flush is None or flush.get_loop() is not loop:
            handle.flush = loop.create_task(self._flush(scope_key, handle))

    async def _flush(self, scope_key: str, handle: _Handle) -> None:
        """Wait ``usage_flush_ms``, then save every bump pending by then: one commit for all
        the retrievals of the scope in that time."""
        try:
            await asyncio.sleep(self.usage_flush_ms / 1000)
            await self._save_bumps(scope_key, handle)
        except Exception as exc:
            if not (self._closed or handle.closed):  # closing saves them
                log.warning("sqlite store: %s: use counts of %d record(s) not saved"
                            " yet, kept for the next save: %s", handle.path, len(handle.pending),
                            _describe(exc))
            return
        finally:
            if handle.flush is asyncio.current_task():
                handle.flush = None
        if handle.pending and not handle.closed:  # counted during a save on the pool
            self._flush_soon(scope_key, handle)

    async def _save_bumps(self, scope_key: str, handle: _Handle) -> None:
        """Commit the handle's pending bumps: on the event loop when that needs no waiting,
        else on the write pool. Returns once every bump pending when it was called is
        committed, including those a commit already under way on the pool has taken."""
        if handle.closed:
            return
        entry = self._writers.get(scope_key)
        # A write, or a save on the pool, under way or queued: commit behind it, even with
        # nothing pending now (it may have taken the bumps and not committed them yet).
        writing = entry is not None and entry[0].locked()
        if not (writing or handle.pending):
            return
        outcome: bool | None = False
        if not writing and len(handle.pending) <= _LOOP_SAVE_ROWS:
            loop = asyncio.get_running_loop()
            give_up = loop.time() + _LOOP_COMMIT_PATIENCE
            outcome = self._commit_on_loop(scope_key, handle)
            while outcome is None and loop.time() < give_up:
                # A pool thread holds the connection for a moment (a retrieval through SQL,
                # a view being built): try again shortly rather than queue a thread behind.
                await asyncio.sleep(0.001)
                outcome = self._commit_on_loop(scope_key, handle)
        if not outcome:
            async with self._writer(scope_key):
                await self._run("write", self._commit_pending, handle)

    def _commit_on_loop(self, scope_key: str, handle: _Handle) -> bool | None:
        """Commit the pending bumps right here on the event loop when that needs no waiting
        at all: nobody holds the connection or is queued to write to the scope, and no other
        connection holds the file's write lock. True when committed; None when a pool thread
        holds the connection right now (the caller may try again); False otherwise: the
        caller commits on the write pool.

        A save writes to the WAL without syncing it: about 10 us of SQLite work per row, at
        most ``_LOOP_SAVE_ROWS`` rows here; handing it to a thread costs more than that in
        GIL hand-offs, each of which can wait for the event loop's switch interval. The one
        slow part a commit can bring, the WAL checkpoint (which syncs), is moved off the
        loop: the commit runs with a WAL hook of its own (which turns SQLite's
        auto-checkpoint off for it), and when the log has reached the auto-checkpoint size a
        checkpoint is queued on the pool."""
        entry = self._writers.get(scope_key)
        if entry is not None and entry[0].locked():
            return False
        if not handle.lock.acquire(blocking=False):
            return None
        try:
            conn = handle.conn
            if handle.closed or conn is None:
                return False
            apsw = _apsw()
            wal_pages = 0

            def note_wal_pages(_conn: Any, _name: str, pages: int) -> int:
                nonlocal wal_pages
                wal_pages = pages
                return apsw.SQLITE_OK

            conn.set_busy_timeout(0)
            conn.set_wal_hook(note_wal_pages)
            try:
                with self._transaction(conn, relaxed=True, bumps=handle):
                    pass
            except apsw.Error:  # busy, or a real failure the pool's attempt will report
                return False
            finally:
                conn.wal_autocheckpoint(_WAL_AUTOCHECKPOINT_PAGES)
                conn.set_busy_timeout(self.busy_timeout_ms)
        finally:
            handle.lock.release()
        if wal_pages >= _WAL_AUTOCHECKPOINT_PAGES:
            self._checkpoint_soon(handle)
        return True

    def _checkpoint_soon(self, handle: _Handle) -> None:
        """Checkpoint the scope's WAL on the write pool, as SQLite's auto-checkpoint would
        have done after the commit (a passive one), unless one is queued already."""
        if handle.checkpoint is not None:
            return
        handle.checkpoint = asyncio.get_running_loop().create_task(self._checkpoint(handle))

    async def _checkpoint(self, handle: _Handle) -> None:
        try:
            await self._run("write", self._checkpoint_now, handle.path)
        except Exception as exc:  # the next commit's checkpoint tries again
            if not self._closed:  # closing checkpoints the log anyway
                log.warning("sqlite store: %s: WAL checkpoint failed: %s", handle.path,
                            _describe(exc))
        finally:
            handle.checkpoint = None

    @staticmethod
    def _checkpoint_now(path: str) -> None:
        """A passive checkpoint on a connection of its own: it neither holds the scope's
        connection nor blocks its writers, so bump commits go on while it syncs the file."""
        conn = _connect(path)
        try:
            # A connection learns the file is in WAL mode from its first read; until then
            # a checkpoint does nothing.
            conn.execute("PRAGMA schema_version").fetchall()
            conn.wal_checkpoint()
        finally:
            conn.close()

    @contextlib.asynccontextmanager
    async def _writer(self, scope_key: str) -> Any:
        entry = self._writers.get(scope_key)
        if entry is None:
            entry = self._writers[scope_key] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._writers[scope_key]

    def path_for(self, scope_key: str) -> str:
        """The database file holding ``scope_key`` (whether or not it exists yet)."""
        check_scope_key(scope_key)
        name = scope_file_name(scope_key)
        path = os.path.join(self.directory, name)
        separators = {os.sep, os.altsep} - {None}
        if (name in {"", ".", ".."} or any(sep in name for sep in separators)
                or os.path.dirname(path) != self.directory):
            raise StoreError(f"scope key {scope_key!r} maps outside the data directory")
        return path

    @contextlib.contextmanager
    def _connection(self, scope_key: str, *, create: bool) -> Iterator[Any]:
        """The scope's handle (its open connection and pending bumps), held exclusively for
        the block; None (only when not ``create``) if the scope has no database file yet."""
        handle = self._acquire(scope_key, create=create)
        if handle is None:
            yield None
            return
        try:
            yield handle
        except StoreError:
            raise
        except _apsw().Error as exc:
            raise StoreError(f"sqlite store: {handle.path}: {_describe(exc)}") from exc
        finally:
            handle.lock.release()

    def _acquire(self, scope_key: str, *, create: bool) -> _Handle | None:
        while True:
            doomed: list[tuple[str, _Handle]] = []
            with self._cache_lock:
                if self._closed:
                    raise StoreError("the sqlite store is closed")
                handle = self._handles.get(scope_key)
                if handle is None:
                    # An evicted handle of this scope still closing may hold usage bumps
                    # not yet committed: finish closing it (that commits them) first, so
                    # two handles of one scope never disagree about a use count.
                    closing = self._closing.get(scope_key)
                    if closing is not None:
                        doomed.append((scope_key, closing))
                    else:
                        path = self.path_for(scope_key)
                        if (not create or self.max_scopes) and not os.path.exists(path):
                            if not create:
                                return None
                            self._reserve_scope(path)
                        handle = self._handles[scope_key] = _Handle(path)
                        while len(self._handles) > self.max_open:
                            doomed.append(self._handles.popitem(last=False))
                        self._closing.update(doomed)
                else:
                    self._handles.move_to_end(scope_key)
            for key, old in doomed:
                self._close_handle(old)
                with self._cache_lock:
                    if self._closing.get(key) is old:
                        del self._closing[key]
            if handle is None:
                continue
            handle.lock.acquire()
            if handle.closed:  # evicted or closed while we waited: start over
                handle.lock.release()
                continue
            if handle.conn is None:
                try:
                    handle.conn = self._open(handle.path, scope_key)
                except BaseException:
                    handle.closed = True
                    with self._cache_lock:
                        if self._handles.get(scope_key) is handle:
                            del self._handles[scope_key]
                    handle.lock.release()
                    raise
            return handle

    def _reserve_scope(self, path: str) -> None:
        """Count a new scope file about to be created at ``path``, or raise
        ``ScopeLimitReached`` when ``max_scopes`` files exist already. The count is read
        from the directory once, then kept by this store's own creations; it is read again
        before refusing, so files removed (or created by another process) meanwhile are
        seen. The caller holds ``_cache_lock``."""
        if self._scope_files is None or self._scope_files >= self.max_scopes:
            self._scope_files = self._count_scope_files()
        if self._scope_files >= self.max_scopes:
            raise ScopeLimitReached(
                f"sqlite store: the data directory holds {self._scope_files} scopes, the"
                f" limit (max_scopes = {self.max_scopes}); a write to a new scope is refused")
        self._scope_files += 1
        log.debug("sqlite store: new scope file %s (%d of %d)", path, self._scope_files,
                  self.max_scopes)

    def _count_scope_files(self) -> int:
        try:
            with os.scandir(self.directory) as entries:
                return sum(1 for entry in entries
                           if entry.name.endswith(FILE_SUFFIX) and entry.is_file())
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise StoreError(f"sqlite store: cannot read the data directory {self.directory}:"
                             f" {exc.strerror or exc}") from exc

    def _close_handle(self, handle: _Handle, *, final: bool = False) -> None:
        """Close a handle's connections, committing its pending usage bumps. ``final`` (the
        store closing) also checkpoints the WAL into the database file and removes it, so a
        store that was closed leaves each scope one self-contained file; an eviction from
        the cache does not (see ``_connect``)."""
        with handle.lock:
            if handle.closed:
                return
            with handle.bump_lock:  # no retrieval adds bumps to a closed handle
                handle.closed = True
            self._release_view(handle)
            with handle.probe_lock:
                probe, handle.probe = handle.probe, None
            if probe is not None:
                with contextlib.suppress(Exception):
                    probe.close()
            conn, handle.conn = handle.conn, None
            if conn is not None and handle.pending:
                try:
                    with self._transaction(conn, relaxed=True, bumps=handle):
                        pass
                except Exception as exc:
                    log.warning("sqlite store: %s: %d usage counts were not committed: %s",
                                handle.path, len(handle.pending), _describe(exc))
            if conn is not None:
                try:
                    if final:
                        conn.config(_apsw().SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0)
                    conn.close()
                except Exception:  # pragma: no cover - closing never fails in practice
                    log.warning("sqlite store: closing %s failed", handle.path, exc_info=True)

    def _open(self, path: str, scope_key: str) -> Any:
        """Open (creating if needed) one scope's database, refuse it if it is not ours or
        not this scope's, bring its schema up to date and reconcile the token index."""
        apsw = _apsw()
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"sqlite store: cannot create the data directory"
                             f" {self.directory}: {exc.strerror or exc}") from exc
        flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
        flags |= getattr(apsw, "SQLITE_OPEN_NOFOLLOW", 0)
        try:
            conn = _connect(path, flags)
        except apsw.Error as exc:
            if isinstance(exc, apsw.CantOpenError) and _out_of_descriptors():
                raise StoreBusy(f"sqlite store: cannot open {path} now: the process has no "
                                "file descriptor left") from exc
            raise StoreError(f"sqlite store: cannot open {path}: {_describe(exc)}") from exc
        try:
            conn.set_busy_timeout(self.busy_timeout_ms)
            self._check_identity(conn, path, scope_key)
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchall()[0][0]
            if str(mode).lower() != "wal":
                raise StoreError(f"sqlite store: {path}: cannot switch to WAL (got {mode})")
            conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            conn.wal_autocheckpoint(_WAL_AUTOCHECKPOINT_PAGES)
            if not self._is_current(conn, scope_key):
                self._prepare(conn, path, scope_key)
            elif path not in self._reconciled:
                with self._transaction(conn):  # writes only what is out of step
                    self._reconcile(conn)
            self._reconciled.add(path)
            conn.execute(VOCAB_TABLE_SQL)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, apsw.Error):
                raise StoreError(f"sqlite store: cannot use {path}: {_describe(exc)}"
                                 "; left untouched") from exc
            raise
        return conn

    def _is_current(self, conn: Any, scope_key: str) -> bool:
        """Whether the file needs nothing before use: this scope's, at this schema version,
        indexed under this store's rules. Then opening it writes nothing (no transaction,
        no sync): the common case, paid on the read path whenever a scope comes back into
        the cache of open files."""
        return (schema.pragma(conn, "application_id") == schema.APPLICATION_ID
                and schema.pragma(conn, "user_version") == schema.SCHEMA_VERSION
                and schema.stored_scope(conn) == scope_key
                and schema.stored_meta(conn, schema.META_FOLDING) == self.analyzer.signature)

    def _prepare(self, conn: Any, path: str, scope_key: str) -> None:
        """Create or migrate the schema, claim the file for the scope, re-derive its terms
        and reconcile the index, in one write transaction."""
        with self._transaction(conn):
            schema.apply_schema(conn, self._clock())
            owner = schema.claim_scope(conn, scope_key)
            if owner != scope_key:
                raise StoreError(f"sqlite store: {path} holds scope {owner!r},"
                                 f" not {scope_key!r}; left untouched")
            self._refold(conn, path)
            self._reconcile(conn)

    @staticmethod
    def _check_identity(conn: Any, path: str, scope_key: str) -> None:
        """Read-only checks before anything is written: the file is a SQLite database, ours
        (or empty), of a schema version we understand, and this scope's."""
        apsw = _apsw()
        try:
            app_id = schema.pragma(conn, "application_id")
            tables = schema.table_count(conn)
        except (apsw.NotADBError, apsw.CorruptError) as exc:
            raise StoreError(f"sqlite store: {path} is not a SQLite database or is corrupt"
                             f" ({_describe(exc)}); left untouched") from exc
        if app_id == 0 and tables == 0:
            return  # a new (or never initialized) file
        if app_id != schema.APPLICATION_ID:
            raise StoreError(f"sqlite store: {path} is a SQLite database of another"
                             " application; left untouched")
        version = schema.pragma(conn, "user_version")
        if version > schema.SCHEMA_VERSION:
            raise StoreError(f"sqlite store: {path} has schema version {version}, newer than"
                             f" this scopemem understands ({schema.SCHEMA_VERSION})")
        owner = schema.stored_scope(conn) if schema.has_table(conn, "meta") else None
        if owner is not None and owner != scope_key:
            raise StoreError(f"sqlite store: {path} holds scope {owner!r}, not {scope_key!r};"
                             " left untouched")

    def _refold(self, conn: Any, path: str) -> None:
        """Re-derive what the file keeps from the text by the tokenizing rules and languages
        (``Analyzer.signature``): every row's dedup key and the active rows' indexed terms,
        once, inside the open's transaction, when the file was written under other rules (or
        none recorded: before Unicode folding). Rows, ids, statuses and use counts are
        untouched."""
        signature = self.analyzer.signature
        if schema.stored_meta(conn, schema.META_FOLDING) == signature:
            return
        rows = conn.execute("SELECT seq, text, keywords, status FROM records").fetchall()
        conn.executemany("UPDATE records SET norm = ? WHERE seq = ?",
                         [(normalize_text(text), seq) for seq, text, _kw, _status in rows])
        conn.execute("DELETE FROM records_fts")
        conn.executemany("INSERT INTO records_fts (rowid, tokens) VALUES (?, ?)",
                         [(seq, fts_tokens(text, json.loads(keywords), self.analyzer))
                          for seq, text, keywords, status in rows if status == "active"])
        schema.set_meta(conn, schema.META_FOLDING, signature)
        conn.execute(schema.NEXT_GENERATION_SQL)
        if rows:
            log.info("sqlite store: %s: re-derived the tokens of %d records (%s)", path,
                     len(rows), signature)

    def _reconcile(self, conn: Any) -> None:
        """Make the token index hold exactly the active rows: drop entries of rows that are
        no longer active (or gone) and index active rows that are missing."""
        conn.execute("DELETE FROM records_fts WHERE rowid NOT IN"
                     " (SELECT seq FROM records WHERE status = 'active')")
        missing = conn.execute(
            "SELECT seq, text, keywords FROM records WHERE status = 'active'"
            " AND seq NOT IN (SELECT rowid FROM records_fts)").fetchall()
        for seq, text, keywords in missing:
            conn.execute("INSERT INTO records_fts (rowid, tokens) VALUES (?, ?)",
                         (seq, fts_tokens(text, json.loads(keywords), self.analyzer)))
        if missing:
            log.warning("sqlite store: re-indexed %d active records", len(missing))
        SqliteStore._compact_index(conn)

    @staticmethod
    def _compact_index(conn: Any) -> None:
        """Merge the token index into one segment when it would have more than
        ``MAX_FTS_SEGMENTS`` after the commit. The caller holds a write transaction whose
        index changes FTS5 still holds in memory: they become one more segment at the
        commit, which the count cannot see yet."""
        if conn.execute(FTS_SEGMENTS_SQL).fetchall()[0][0] >= MAX_FTS_SEGMENTS:
            conn.execute("INSERT INTO records_fts (records_fts) VALUES ('optimize')")

    @staticmethod
    @contextlib.contextmanager
    def _snapshot(conn: Any) -> Iterator[None]:
        """A read transaction: every statement in the block reads the same committed state."""
        conn.execute("BEGIN")
        try:
            yield
        finally:
            if not conn.getautocommit():
                conn.execute("COMMIT")

    @contextlib.contextmanager
    def _transaction(self, conn: Any, *, relaxed: bool = False,
                     bumps: _Handle | None = None, changes_rows: bool = True,
                     applied: set[int] | None = None) -> Iterator[None]:
        """One ``BEGIN IMMEDIATE`` transaction: committed if the block finishes, rolled back
        if it raises. ``relaxed`` commits without waiting for the disk (usage bumps only).
        The pending usage bumps of the handle ``bumps`` (held by the caller) are applied
        first, so the block reads rows with them; they are pending again if the transaction
        does not commit (``applied``, when given, gathers their seqs). A transaction that is
        not ``relaxed`` on a handle changes rows (unless ``changes_rows`` says it never
        does): it drops the scope's view and counts a generation."""
        relax = relaxed and self.synchronous in ("full", "extra")
        changes_rows = changes_rows and bumps is not None and not relaxed
        if changes_rows:
            # The scope's rows are about to change: no retrieval may be answered from the
            # view from here on (one already answered saw the rows before this commit).
            self._release_view(bumps)
            bumps.view_refused = False
        if relax:
            conn.execute("PRAGMA synchronous = NORMAL")
        batch: dict[int, list[int]] = {}
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if bumps is not None:
                    batch = bumps.take_batch()
                    if batch:
                        _apply_bumps(conn, batch)
                        if applied is not None:
                            applied.update(batch)
                yield
                if changes_rows:
                    conn.execute(schema.NEXT_GENERATION_SQL)
            except BaseException:
                if not conn.getautocommit():
                    with contextlib.suppress(Exception):
                        conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except BaseException:
                if not conn.getautocommit():
                    with contextlib.suppress(Exception):
                        conn.execute("ROLLBACK")
                raise
            batch = {}
        finally:
            if batch and bumps is not None:
                bumps.return_batch(batch)
            if relax:
                conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")


def default_max_open() -> int:
    """How many scope files may be open at once by default: a twelfth of the process's soft
    open-file limit (an open scope holds up to six descriptors: the database, its WAL and its
    shared memory, for the scope's connection and for its view's probe; the worker keeps
    half the limit for its network connections), at least 16 and at most 4,096."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 4096
    return max(16, min(4096, soft // 12))


def _out_of_descriptors() -> bool:
    """Whether the process cannot open one more file (EMFILE/ENFILE): what a ``CantOpen``
    means when the directory and the path are fine."""
    try:
        fd = os.open(os.devnull, os.O_RDONLY)
    except OSError as exc:
        return exc.errno in (errno.EMFILE, errno.ENFILE)
    os.close(fd)
    return False


def _connect(path: str, flags: int | None = None) -> Any:
    """An apsw connection to ``path`` (read-write, not creating, unless ``flags`` say
    otherwise) with ``secure_delete`` on: whatever SQLite frees (a forgotten row's cells, a
    purged row, a merged index segment) is overwritten with zeros, in the tables and in the
    FTS5 shadow tables alike; and no checkpoint on close. Every connection the store opens is
    made here."""
    apsw = _apsw()
    conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READWRITE if flags is None else flags)
    try:
        conn.execute("PRAGMA secure_delete = ON")
        # Closing does not checkpoint: every commit is already durable in the WAL (synced
        # as ``synchronous`` says), and a checkpoint on close (two syncs and an unlink of the
        # WAL) made every eviction from the open-connection cache cost a millisecond, paid
        # on the read path when many scopes take turns. The WAL is checkpointed as writes
        # grow it (``wal_autocheckpoint``, and ``_checkpoint_soon``), and stays on disk.
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    except BaseException:
        conn.close()
        raise
    return conn


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@hookimpl
def scopemem_register_stores(register) -> None:  # type: ignore[no-untyped-def]
    register("sqlite", SqliteStore.from_settings)
