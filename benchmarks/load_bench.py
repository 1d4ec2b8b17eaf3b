"""Realistic load: Zipf text, many and large scopes, long briefs. Prints figures; asserts nothing.

    python benchmarks/load_bench.py [--quick] [--scopes 10,1000,10000] [--rounds 3]
                                    [--seconds 2] [--clients 32] [--large 10000]
                                    [--only 5,6] [--cache-rows 0] [--heavy common]

Text is drawn from a seeded 20,000-word pseudo-vocabulary with probability proportional to
1 / rank^1.07 (no scopemem code in the generator): records of 8-40 words, briefs of 5-40
words, and one brief in ten of 300 words (a pasted log). Scope sizes are 20 records (the
many-scope cases), 500 and ``--large`` (10,000, the largest cap a scope may have; a larger
figure lifts the cap for this run only). Everything is seeded once, in process, through
``SharedSqliteStore`` (``synchronous=off`` while seeding; the seeding times are printed), into
one data directory that a ``scopemem serve`` subprocess then serves over loopback; the raw
FTS5 baselines (``raw_fts.py``) read a directory beside it written with the same batches in
the same order.

Every figure is a ratio to a baseline measured in the same run, in ``--rounds`` rounds in
which the baseline and the measured cases take turns (``--seconds`` each, and a bounded
count of operations), so a drift in the machine's speed reaches both. Each line prints the
median across rounds of the measured value and of the baseline, and the ratio's per-round
min / median / max:

1. many scopes: ``--clients`` clients (a tenth of them writing one record per request,
   the rest retrieving with a brief, limit 8) over each ``--scopes`` count of 20-record
   scopes, chosen at random per request, against the first count (10); then, if strace
   exists, the syscalls of read-only load (fsync, fdatasync, openat, unlink per request:
   each scope's first retrieval since the worker started, apart from the later ones),
   and the worker's open file descriptors after the largest case;
2. head-of-line blocking: one light client's ``/retrieve`` p99 on a 500-record scope while
   8 clients send heavy queries (the 24 commonest words, or 300-word briefs) to the large
   scope, against the same while the 8 send short briefs to another 500-record scope;
3. reads after writes (in process): the first ``SharedSqliteStore.retrieve`` after a
   one-record write to the large scope against the raw FTS5 query (``raw_fts.RAW_FTS_SQL``) after
   the same write; a write of 50 at the cap (10,000: each evicts 50) against a raw insert
   of the same rows into a copy of the file, over 100 batches, p50 and p99;
4. the per-turn read: ``Memory.context_block`` over four 500-record scopes (org, repo,
   channel, user), in process and over the worker (``WorkerStore``), against the raw SQL it
   needs in process (four FTS5 candidate queries and the repo window's listing);
5. a realistic brief's retrieve on the large scope (in process) against the raw FTS5 query,
   with how many records the brief's prefilter terms match, and against the same retrieve
   on a 500-record scope;
6. ``InMemoryStore.retrieve`` on the large scope's records against ``SharedSqliteStore``'s.

``--cache-rows N`` sets the SQLite store's ``cache_rows`` in every store measured (the
worker's and the in-process ones; 0: no copies of scopes in memory), to measure the copies on
and off. ``--heavy common`` makes figure 2's heavy clients send only the 24 commonest words
(every record of the large scope holds them), ``--heavy long`` only the 300-word briefs.

``--quick`` is a smoke run (scopes 10,1000; smaller large scope; short rounds). ``--only``
runs the named figures alone (``--only 5,6``: the large scope's retrieve, in process), seeding
only the scopes they read.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import itertools
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import aiohttp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.hostile_bench import percentile  # noqa: E402
from benchmarks.raw_fts import (  # noqa: E402
    RAW_FTS_SQL,
    RECORD_COLUMNS,
    RawScopes,
    match_expression,
    raw_connection,
    raw_insert,
    raw_path,
)
from benchmarks.store_bench import SCOPE, prefilter  # noqa: E402
from benchmarks.worker_bench import (  # noqa: E402
    TOKEN,
    free_port,
    run_clients,
    subprocess_server,
)
from scopemem.api.memory import Memory  # noqa: E402
from scopemem.config import MemoryConfig  # noqa: E402
from scopemem.core import engine  # noqa: E402
from scopemem.core.records import MAX_SCOPE_CAP, MAX_TEXT_CHARS, Candidate, Kind  # noqa: E402
from scopemem.core.requests import Request  # noqa: E402
from scopemem.stores.memory import InMemoryStore  # noqa: E402
from scopemem.stores.sqlite_shared import SharedSqliteStore  # noqa: E402
from scopemem.stores.sqlite_shared.store import POSTINGS_PER_ROW  # noqa: E402
from scopemem.stores.worker import WorkerStore  # noqa: E402

LIMIT = 8
SMALL = 500
MANY_RECORDS = 20
HEAVY_CLIENTS = 8
LIGHT_SCOPE, OTHER_SCOPE = "repo:load/light", "repo:load/other"
ORG, REPO, CHANNEL, USER = "loadorg", "loadorg/app", "slack:C0LOAD", "slack:U0LOAD"
WINDOW_SQL = (f"SELECT {RECORD_COLUMNS} FROM records"
              " WHERE status = 'active' AND kind = 'fact' ORDER BY seq DESC LIMIT ?")


#: ``cache_rows`` for every store measured (``--cache-rows``; None: the store's default).
CACHE_ROWS: int | None = None


def measured_store(data: str, cap: int) -> SharedSqliteStore:
    """The store under measurement, with ``--cache-rows`` if given."""
    if CACHE_ROWS is None:
        return SharedSqliteStore(data, cap=cap)
    return SharedSqliteStore(data, cap=cap, postings_cache=CACHE_ROWS * POSTINGS_PER_ROW)


def many_scope(n: int) -> str:
    return f"channel:load:C{n:05d}"


# --- text ---------------------------------------------------------------------------------------


class Zipf:
    """Seeded pseudo-words drawn by rank with probability proportional to 1 / rank^1.07."""

    def __init__(self, seed: int = 15, words: int = 20_000, exponent: float = 1.07) -> None:
        self.rng = random.Random(seed)
        letters = "abcdefghijklmnopqrstuvwxyz"
        vocab: dict[str, None] = {}
        while len(vocab) < words:
            vocab["".join(self.rng.choice(letters) for _ in range(self.rng.randint(3, 9)))] = None
        self.vocab = list(vocab)
        self.cumulative = list(itertools.accumulate(
            1 / rank ** exponent for rank in range(1, words + 1)))

    def words(self, n: int) -> list[str]:
        top = self.cumulative[-1]
        random_ = self.rng.random
        return [self.vocab[bisect.bisect(self.cumulative, random_() * top)] for _ in range(n)]

    def text(self, low: int, high: int) -> str:
        return " ".join(self.words(self.rng.randint(low, high)))[:MAX_TEXT_CHARS]

    def record(self) -> str:
        return self.text(8, 40)

    def brief(self) -> str:
        """5-40 words; one brief in ten is a 300-word pasted log."""
        return self.text(300, 300) if self.rng.random() < 0.1 else self.text(5, 40)

    def short_brief(self) -> str:
        return self.text(5, 40)


def candidates(zipf: Zipf, n: int, thread: str = "slack:C0LOAD/1") -> list[Candidate]:
    return [Candidate(kind=Kind.FACT, text=zipf.record(), source_thread_key=thread)
            for _ in range(n)]


# --- measuring ----------------------------------------------------------------------------------


def p50(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1000 if samples else float("nan")


def p99(samples: Sequence[float]) -> float:
    return percentile(list(samples), 0.99) * 1000


def ratio_line(label: str, base_label: str, pairs: Sequence[tuple[float, float]],
               unit: str = "ms", target: str = "") -> None:
    """One figure: the median across rounds of the measured value and of its baseline, and
    the per-round ratio's min / median / max."""
    ratios = [m / b if b else float("nan") for m, b in pairs]
    measured = statistics.median(m for m, _ in pairs)
    base = statistics.median(b for _, b in pairs)
    print(f"   {label:<40}{measured:10.2f} {unit:<5} vs {base_label:<26}{base:10.2f} {unit:<5}"
          f" = {statistics.median(ratios):5.2f}x  (rounds {min(ratios):.2f} / "
          f"{statistics.median(ratios):.2f} / {max(ratios):.2f})"
          + (f"  target {target}" if target else ""))


Op = Callable[[], Awaitable[object]]


async def alternate(cases: Sequence[tuple[str, Op, Op | None]], rounds: int, seconds: float,
                    max_runs: int, block: int = 10) -> dict[str, list[list[float]]]:
    """Per case, per round, the times (s) of its operation. In every round the cases take
    turns in blocks of ``block`` calls until ``seconds`` per case have passed or each made
    ``max_runs`` calls; ``before`` (untimed) runs ahead of every call."""
    times: dict[str, list[list[float]]] = {name: [] for name, _, _ in cases}
    for _ in range(rounds):
        samples: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        deadline = time.perf_counter() + seconds * len(cases)
        while time.perf_counter() < deadline and all(
                len(s) < max_runs for s in samples.values()):
            for name, op, before in cases:
                for _ in range(block):
                    if before is not None:
                        await before()
                    started = time.perf_counter()
                    await op()
                    samples[name].append(time.perf_counter() - started)
        for name in samples:
            times[name].append(samples[name])
    return times


def pairs_of(times: dict[str, list[list[float]]], measured: str, base: str,
             stat: Callable[[Sequence[float]], float] = p50) -> list[tuple[float, float]]:
    return [(stat(m), stat(b)) for m, b in zip(times[measured], times[base], strict=True)]


# --- seeding ------------------------------------------------------------------------------------


class Both:
    """Writes to the store under measurement and to the raw FTS5 baselines' files beside it
    (``raw_fts.RawScopes``), the same records."""

    def __init__(self, *stores: Any) -> None:
        self.stores = stores

    async def write(self, scope_key: str, batch: Sequence[Candidate]) -> Any:
        counts = [await store.write(scope_key, batch) for store in self.stores]
        return counts[0]

    async def close(self) -> None:
        for store in self.stores:
            await store.close()


async def seed(data: str, raw_data: str, zipf: Zipf, scope_counts: Sequence[int], large: int,
               figures: frozenset[int]) -> tuple[list[Candidate], list[str]]:
    """Every scope the ``figures`` read; the large scope's candidates and the context
    scopes. The large and the 500-record scopes are written to the raw FTS5 baselines in
    ``raw_data`` too, the same batches in the same order."""
    store: Any = SharedSqliteStore(data, cap=MAX_SCOPE_CAP, synchronous="off")
    both = Both(store, RawScopes(raw_data))
    if large > MAX_SCOPE_CAP:
        store.cap = large  # past the configurable maximum, for this measurement only
    started = time.perf_counter()
    count = max(scope_counts) if 1 in figures else 0
    keys = [many_scope(n) for n in range(count)]
    for start in range(0, count, 32):
        await asyncio.gather(*(store.write(key, candidates(zipf, MANY_RECORDS))
                               for key in keys[start:start + 32]))
    many = time.perf_counter() - started
    started = time.perf_counter()
    written: list[Candidate] = []
    for _ in range(large // 50):
        batch = candidates(zipf, 50)
        await both.write(SCOPE, batch)
        written.extend(batch)
    big = time.perf_counter() - started
    started = time.perf_counter()
    memory = Memory(MemoryConfig(enabled=True, organization=ORG, store="sqlite"), store)
    context_keys = list((await memory.context(context_request("probe"))).scopes)
    small_keys = [LIGHT_SCOPE, OTHER_SCOPE, *context_keys] if figures & {2, 4, 5} else []
    for key in small_keys:
        for _ in range(SMALL // 50):
            await both.write(key, candidates(zipf, 50))
    small = time.perf_counter() - started
    await both.close()
    size = sum(os.path.getsize(os.path.join(data, name)) for name in os.listdir(data))
    print(f"seeded in process (synchronous=off): {count:,} scopes x {MANY_RECORDS} records in "
          f"{many:.1f} s ({many / max(1, count) * 1000:.2f} ms a scope); {large:,} records in "
          f"one scope in {big:.1f} s; {len(small_keys)} scopes x {SMALL} records in "
          f"{small:.1f} s;"
          f" {size / 2**20:.0f} MiB on disk")
    return written, context_keys


def context_request(text: str) -> Request:
    return Request(text=text, user_id=USER, channel_id=CHANNEL, repo=REPO,
                   channel_visibility="public")


# --- the worker ---------------------------------------------------------------------------------


def server_pid(port: int) -> int | None:
    """The pid of the ``scopemem serve`` listening on ``port`` (not of a strace around it)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and str(port).encode() in argv and b"strace" not in argv[0]:
            return int(entry)
    return None


async def stop_pid(pid: int, patience: float = 30.0) -> None:
    """SIGTERM ``pid``, then SIGKILL if it is still there after ``patience`` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            os.kill(pid, 0)  # raises ProcessLookupError once it is gone
            await asyncio.sleep(0.1)
        os.kill(pid, signal.SIGKILL)


@contextlib.asynccontextmanager
async def serve(data: str, wrap: Sequence[str] = ()) -> AsyncIterator[tuple[str, int]]:
    port = free_port()
    env = {**os.environ, "SCOPEMEM_TOKEN": TOKEN}
    env.pop("SCOPEMEM_CONFIG", None)
    # The current directory comes first on sys.path with -m: run from an empty one.
    with tempfile.TemporaryDirectory(prefix="scopemem-load-cwd-") as cwd:
        config: list[str] = []
        if CACHE_ROWS is not None:
            path = os.path.join(cwd, "scopemem.toml")
            with open(path, "w", encoding="utf-8") as out:
                out.write(f"[memory.stores.sqlite]\ncache_rows = {CACHE_ROWS}\n")
            config = ["--config", path]
        argv = [*wrap, sys.executable, "-m", "scopemem", *config, "serve", "--port",
                str(port), "--store", "sqlite", "--data", data, "--no-access-log"]
        pid = None
        try:
            async with subprocess_server(argv, port, env, cwd=cwd) as url:
                pid = server_pid(port) if wrap else None
                yield url, port
        finally:
            # Stopping a strace stops the trace, not the server it wraps: stop that too.
            if pid is not None:
                await stop_pid(pid)


def session_for(clients: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients * 2),
                                 timeout=aiohttp.ClientTimeout(total=60))


Body = Callable[[int, random.Random], tuple[str, dict[str, Any]]]


def bodies(url: str, scopes: int, briefs: Sequence[str], texts: Sequence[str]
           ) -> tuple[Body, Body]:
    def read(_i: int, rng: random.Random) -> tuple[str, dict[str, Any]]:
        return url + "/retrieve", {"scopeKey": many_scope(rng.randrange(scopes)),
                                   "query": rng.choice(briefs), "limit": LIMIT}

    def write(_i: int, rng: random.Random) -> tuple[str, dict[str, Any]]:
        return url + "/write", {"scopeKey": many_scope(rng.randrange(scopes)), "records": [
            {"kind": "fact", "sourceThreadKey": "slack:C0LOAD/2", "text": rng.choice(texts)}]}

    return read, write


async def many_scopes(url: str, port: int, args: argparse.Namespace, briefs: list[str],
                      texts: list[str]) -> None:
    base = args.scope_counts[0]
    writers = max(1, round(args.clients / 10))
    readers = args.clients - writers
    counts = args.scope_counts
    rates: dict[int, list[float]] = {n: [] for n in counts}
    reads: dict[int, list[list[float]]] = {n: [] for n in counts}
    writes: dict[int, list[list[float]]] = {n: [] for n in counts}
    errors: Counter[int] = Counter()
    async with session_for(args.clients) as session:
        read, write = bodies(url, counts[0], briefs, texts)
        await run_clients(session, args.clients, min(1.0, args.seconds), read)  # warm-up
        # Every scope's first retrieval since the worker started saves its use counts into
        # a new WAL, which SQLite syncs (once per scope per start, see syscalls below). The
        # 10 scopes are past it after the warm-up; the larger counts get the same, so the
        # figure compares requests, not a start's once-per-scope cost (printed apart).
        firsts: dict[int, float] = {}
        for n in counts[1:]:
            started = time.perf_counter()
            await visit_every_scope(session, url, n, briefs, args.clients)
            firsts[n] = n / (time.perf_counter() - started)
        for _ in range(args.rounds):
            for n in counts:
                read, write = bodies(url, n, briefs, texts)
                if n != base:
                    # The cases take turns: each is measured as it stands when it runs
                    # alone, each scope visited once just before.
                    await visit_every_scope(session, url, n, briefs, args.clients)
                (r_lat, r_err), (w_lat, w_err) = await asyncio.gather(
                    run_clients(session, readers, args.seconds, read),
                    run_clients(session, writers, args.seconds, write, first_client=readers))
                rates[n].append((len(r_lat) + len(w_lat)) / args.seconds)
                reads[n].append(r_lat)
                writes[n].append(w_lat)
                errors[n] += r_err + w_err
    pid = server_pid(port)
    fds = len(os.listdir(f"/proc/{pid}/fd")) if pid else None
    print(f"\n1. many scopes: {readers} clients retrieving (a brief, limit {LIMIT}) and {writers}"
          f" writing one record, over scopes of {MANY_RECORDS} records chosen at random per "
          f"request, {args.seconds:g} s per case per round, {args.rounds} rounds")
    for n in counts:
        total_w = sum(map(len, writes[n]))
        share = total_w / max(1, total_w + sum(map(len, reads[n])))
        print(f"   -- {n:,} scopes: {sum(map(len, reads[n]))} retrievals, {total_w} writes "
              f"({share:.0%}), {errors[n]} errors")
        if n == base:
            continue
        print(f"   each of the {n:,} scopes' first retrieval since the worker started "
              f"(before the rounds, retrievals only): {firsts[n]:,.0f} req/s")
        ratio_line(f"req/s over {n:,} scopes", f"over {base:,} scopes",
                   list(zip(rates[n], rates[base], strict=True)), unit="req/s")
        for name, lat in (("retrieve", reads), ("write", writes)):
            for stat_name, stat in (("p50", p50), ("p99", p99)):
                ratio_line(f"{name} {stat_name} over {n:,} scopes", f"over {base:,} scopes",
                           [(stat(m), stat(b)) for m, b in zip(lat[n], lat[base], strict=True)])
    print(f"   worker's open file descriptors after the {counts[-1]:,}-scope case: {fds}")


async def head_of_line(url: str, args: argparse.Namespace, zipf: Zipf, briefs: list[str]
                       ) -> None:
    light_briefs = [zipf.short_brief() for _ in range(200)]
    common = " ".join(zipf.vocab[:24])
    heavy_briefs = [zipf.text(300, 300) for _ in range(20)]

    def light_body(scope: str) -> Body:
        def body(_i: int, rng: random.Random) -> tuple[str, dict[str, Any]]:
            return url + "/retrieve", {"scopeKey": scope, "query": rng.choice(light_briefs),
                                       "limit": LIMIT}
        return body

    def heavy_body(_i: int, rng: random.Random) -> tuple[str, dict[str, Any]]:
        share = {"common": 1.0, "long": 0.0}.get(args.heavy, 0.5)
        query = common if rng.random() < share else rng.choice(heavy_briefs)
        return url + "/retrieve", {"scopeKey": SCOPE, "query": query, "limit": LIMIT}

    light: dict[str, list[list[float]]] = {"beside light": [], "beside heavy": []}
    others: dict[str, list[float]] = {"beside light": [], "beside heavy": []}
    async with session_for(HEAVY_CLIENTS + 1) as session:
        await run_clients(session, HEAVY_CLIENTS, min(1.0, args.seconds), heavy_body)  # warm-up
        for _ in range(args.rounds):
            for name, body in (("beside light", light_body(OTHER_SCOPE)),
                               ("beside heavy", heavy_body)):
                (lat, _), (other, _) = await asyncio.gather(
                    run_clients(session, 1, args.seconds, light_body(LIGHT_SCOPE), 100),
                    run_clients(session, HEAVY_CLIENTS, args.seconds, body))
                light[name].append(lat)
                others[name].extend(other)
    heavy = {"common": "the 24 commonest words", "long": "a 300-word brief"}.get(
        args.heavy, "the 24 commonest words or a 300-word brief")
    print(f"\n2. head-of-line blocking: one client's /retrieve on a {SMALL}-record scope beside "
          f"{HEAVY_CLIENTS} clients (heavy: {heavy} on the "
          f"{args.large:,}-record scope; light: 5-40-word briefs on another {SMALL}-record "
          "scope)")
    for stat_name, stat in (("p99", p99), ("p50", p50)):
        ratio_line(f"light {stat_name} beside heavy queries", "beside light queries",
                   [(stat(m), stat(b)) for m, b in zip(
                       light["beside heavy"], light["beside light"], strict=True)],
                   target="<= 2x" if stat_name == "p99" else "")
    print(f"   the 8 heavy clients' p50 {p50(others['beside heavy']):.1f} ms, p99 "
          f"{p99(others['beside heavy']):.1f} ms (n = {len(others['beside heavy'])}); the light "
          f"ones' p50 {p50(others['beside light']):.1f} ms (n = {len(others['beside light'])})")


async def syscalls(data: str, args: argparse.Namespace, briefs: list[str], texts: list[str]
                   ) -> None:
    if shutil.which("strace") is None:
        print("\n1b. syscalls on the read path: skipped (no strace on this machine)")
        return
    with tempfile.TemporaryDirectory(prefix="scopemem-load-strace-") as tmp:
        log = os.path.join(tmp, "strace.log")
        wrap = ("strace", "-f", "-qq", "--seccomp-bpf", "-ttt", "-o", log,
                "-e", "trace=fsync,fdatasync,openat,unlink")
        windows: dict[str, tuple[float, float, int]] = {}
        async with serve(data, wrap) as (url, _port), session_for(args.clients) as session:
            for n in (args.scope_counts[0], args.scope_counts[-1]):
                read, _ = bodies(url, n, briefs, texts)
                # Every scope's first retrieval since the worker started (and the usage
                # save it brings, which starts the scope's WAL), counted apart: a cost
                # paid once per scope per start, not on every read.
                started = time.time()
                first = await visit_every_scope(session, url, n, briefs, args.clients)
                await asyncio.sleep(1.5)  # their usage saves land inside this window
                windows[f"{n:,} scopes, each one's first retrieval"] = (
                    started, time.time(), first)
                started = time.time()
                latencies, _ = await run_clients(session, args.clients, args.seconds, read)
                await asyncio.sleep(1.5)  # ... and those of the window inside it
                windows[f"{n:,} scopes, later retrievals"] = (
                    started, time.time(), len(latencies))
        counted: dict[str, Counter[str]] = {n: Counter() for n in windows}
        with open(log, errors="replace") as f:
            for line in f:
                parts = line.split(None, 2)
                if len(parts) < 3 or parts[2].startswith("<..."):
                    continue
                name = parts[2].split("(", 1)[0]
                stamp = float(parts[1])
                for n, (start, end, _) in windows.items():
                    if start <= stamp <= end:
                        counted[n][name] += 1
    print(f"\n1b. syscalls on the read path (a worker under strace, {args.clients} clients "
          f"retrieving only, {args.seconds:g} s, plus the usage flushes of the next 1.5 s):")
    for n, (_, _, requests) in windows.items():
        per = ", ".join(f"{name} {counted[n][name] / max(1, requests):.3f}"
                        for name in ("fsync", "fdatasync", "openat", "unlink"))
        print(f"   over {n}: {requests} retrievals; per retrieval {per}"
              f" (totals {dict(counted[n])})")


async def visit_every_scope(session: aiohttp.ClientSession, url: str, scopes: int,
                            briefs: Sequence[str], clients: int) -> int:
    """One retrieval of each of the ``scopes`` many-scope scopes, ``clients`` at a time."""
    order = iter(range(scopes))
    rng = random.Random(9)

    async def client() -> None:
        for n in order:
            async with session.post(url + "/retrieve", json={
                    "scopeKey": many_scope(n), "query": rng.choice(briefs), "limit": LIMIT},
                    headers={"Authorization": f"Bearer {TOKEN}"}) as response:
                await response.read()

    await asyncio.gather(*(client() for _ in range(clients)))
    return scopes


async def per_turn(url: str | None, args: argparse.Namespace, briefs: list[str],
                   context_keys: list[str], data: str, raw_data: str) -> None:
    config = MemoryConfig(enabled=True, organization=ORG, store="sqlite")
    local_store = measured_store(data, MAX_SCOPE_CAP)
    local = Memory(config, local_store)
    remote_store = WorkerStore(url, TOKEN, timeout=30) if url else None
    remote = Memory(config, remote_store) if remote_store else None
    cap = engine.candidate_cap(config.limit)
    raws = {key: raw_connection(raw_path(raw_data, key), "full") for key in context_keys}
    repo_key = f"repo:{REPO}"
    rng = random.Random(4)

    async def raw() -> None:
        expression = match_expression(prefilter(rng.choice(briefs)))
        for conn in raws.values():
            conn.execute(RAW_FTS_SQL, (expression, cap)).fetchall()
        raws[repo_key].execute(WINDOW_SQL, (config.repo_window,)).fetchall()

    def turn(memory: Memory) -> Op:
        async def op() -> None:
            await memory.context_block(context_request(rng.choice(briefs)))
        return op

    def drain(memory: Memory) -> Op:
        async def op() -> None:
            await memory.drain(timeout=10)  # the shown hits' use counts, saved untimed
        return op

    cases: list[tuple[str, Op, Op | None]] = [("raw", raw, None),
                                              ("local", turn(local), drain(local))]
    if remote is not None:
        cases.append(("worker", turn(remote), drain(remote)))
    for _, op, before in cases:  # warm-up
        for _ in range(5):
            if before is not None:
                await before()
            await op()
    times = await alternate(cases, args.rounds, args.seconds, max_runs=2000)
    print(f"\n4. the per-turn read: Memory.context_block over {len(context_keys)} scopes x "
          f"{SMALL} records (limit {config.limit}, repo window {config.repo_window}), against "
          f"{len(context_keys)} raw FTS5 queries + the raw window listing, in process")
    for name, label, target in (("local", f"in process ({type(local_store).__name__})",
                                  "<= 1.5x"),
                                ("worker", "over the worker (WorkerStore)", "<= 2.5x")):
        if name not in times:
            continue
        for stat_name, stat in (("p50", p50), ("p99", p99)):
            ratio_line(f"{label} {stat_name}", "raw SQL", pairs_of(times, name, "raw", stat),
                       target=target)
    print("   n = " + " / ".join(f"{name} {sum(map(len, t))}" for name, t in times.items()))
    for conn in raws.values():
        conn.close()
    # Memory.close saves the blocks' counters, then closes the store: closing the store
    # first left them to a timer that found it closed (a warning per store).
    await local.drain(timeout=10)
    await local.close()
    if remote is not None:
        await remote.drain(timeout=10)
        await remote.close()


# --- in process ---------------------------------------------------------------------------------


async def in_process(data: str, raw_data: str, args: argparse.Namespace, zipf: Zipf,
                     briefs: list[str],
                     written: list[Candidate]) -> None:
    cap = engine.candidate_cap(LIMIT)
    store = measured_store(data, min(args.large, MAX_SCOPE_CAP))
    store.cap = args.large  # at the cap (above the configurable maximum only if --large is)
    # The one-record writes of figure 3 reach the raw baseline's file too.
    beside = Both(store, RawScopes(raw_data))
    measured = type(store).__name__
    raw = raw_connection(raw_path(raw_data, SCOPE), "full")
    rng = random.Random(5)

    def raw_query(pick: Callable[[], str]) -> Op:
        async def op() -> None:
            expression = match_expression(prefilter(pick()))
            raw.execute(RAW_FTS_SQL, (expression, cap)).fetchall()
        return op

    def store_query(pick: Callable[[], str], target: Any = store, scope: str = SCOPE) -> Op:
        async def op() -> None:
            await target.retrieve(scope, pick(), LIMIT)
        return op

    def matched(query: str) -> int:
        expression = match_expression(prefilter(query))
        return raw.execute("SELECT count(*) FROM records_fts WHERE records_fts MATCH ?",
                           (expression,)).fetchall()[0][0]

    active = raw.execute("SELECT count(*) FROM records WHERE status = 'active'"
                         ).fetchall()[0][0]

    def pick() -> str:
        return rng.choice(briefs)

    if 5 in args.figures:  # 5. a realistic brief.
        await store.retrieve(SCOPE, briefs[0], LIMIT)
        await store.retrieve(SCOPE, briefs[1], LIMIT)
        await store.retrieve(LIGHT_SCOPE, briefs[0], LIMIT)
        times = await alternate([("raw", raw_query(pick), None),
                                 ("store", store_query(pick), None),
                                 ("small", store_query(pick, scope=LIGHT_SCOPE), None)],
                                args.rounds, args.seconds, max_runs=2000)
        short = [matched(b) for b in briefs if len(b.split()) <= 40]
        long = [matched(b) for b in briefs if len(b.split()) > 40]
        print(f"\n5. a realistic brief's retrieve on the {active:,}-record scope (limit {LIMIT}, "
              f"candidate cap {cap}), in process")
        ratio_line(f"{measured}.retrieve p50", "raw FTS5 query", pairs_of(times, "store", "raw"))
        ratio_line(f"{measured}.retrieve p99", "raw FTS5 query",
                   pairs_of(times, "store", "raw", p99))
        ratio_line(f"{measured}.retrieve p50", f"on a {SMALL}-record scope",
                   pairs_of(times, "store", "small"), target="<= 10x")
        for name, counts in (("a 5-40-word brief", short), ("a 300-word brief", long)):
            if counts:
                median = statistics.median(counts)
                print(f"   {name}'s prefilter terms match {median:,.0f} records (median of "
                      f"{len(counts)}; {median / active:.0%} of the scope; max {max(counts):,})")

    if 6 in args.figures:
        # 6. the in-process store on the same records (loaded directly: filling it through
        # write() compares every candidate with every record).
        clock = store._clock
        memory = InMemoryStore(cap=MAX_SCOPE_CAP, clock=clock)
        memory._scopes[SCOPE] = [engine.mint_record(SCOPE, seq, candidate, clock())
                                 for seq, candidate in enumerate(written, start=1)]
        memory._next_seq[SCOPE] = len(written) + 1
        await memory.retrieve(SCOPE, briefs[0], LIMIT)
        times = await alternate([("store", store_query(pick), None),
                                 ("memory", store_query(pick, memory), None)],
                                args.rounds, args.seconds, max_runs=200, block=5)
        print(f"\n6. InMemoryStore.retrieve on the same {len(written):,} records")
        ratio_line("InMemoryStore.retrieve p50", f"{measured}.retrieve",
                   pairs_of(times, "memory", "store"), target="<= 2x")

    if 3 not in args.figures:
        raw.close()
        await beside.close()
        return
    # 3. reads after writes, then writes at the cap.
    async def one_write() -> None:
        await beside.write(SCOPE, candidates(zipf, 1))

    times = await alternate([("raw", raw_query(pick), one_write),
                             ("store", store_query(pick), one_write)],
                            args.rounds, args.seconds, max_runs=args.after_writes, block=1)
    print(f"\n3. reads after writes on the {args.large:,}-record scope, in process")
    ratio_line("first retrieve after a write p50", "raw FTS5 query", pairs_of(times, "store",
                                                                            "raw"))
    ratio_line("first retrieve after a write p99", "raw FTS5 query",
               pairs_of(times, "store", "raw", p99))
    print(f"   n = {sum(map(len, times['store']))} / {sum(map(len, times['raw']))}"
          " (each after a one-record write, untimed)")
    for each in beside.stores:
        await each.flush()
    copy = os.path.join(data, "raw-copy.db")
    with contextlib.closing(raw_connection(raw_path(raw_data, SCOPE), "full")) as source, \
            contextlib.closing(raw_connection(copy, "full")) as target, \
            target.backup("main", source, "main") as backup:
        backup.step()
    raw_target = raw_connection(copy, "full")
    now = itertools.count(1_800_000_000_000, 1000)
    at_cap: list[float] = []
    inserted: list[float] = []
    evicted = 0
    deadline = time.perf_counter() + args.seconds * 10
    for _ in range(args.batches):
        if time.perf_counter() > deadline:
            break
        batch = candidates(zipf, 50)
        started = time.perf_counter()
        counts = await store.write(SCOPE, batch)
        at_cap.append(time.perf_counter() - started)
        evicted += counts.evicted
        started = time.perf_counter()
        raw_insert(raw_target, batch, next(now), SCOPE)
        inserted.append(time.perf_counter() - started)
    per_round = max(1, -(-len(at_cap) // args.rounds))
    print(f"   a write of 50 at the cap ({store.cap:,}; {evicted / max(1, len(at_cap)):.0f} "
          f"evicted per write), {len(at_cap)} batches in rounds of {per_round}, each beside a "
          "raw insert of the same rows into a copy of the file (then all batches at once):")
    for stat_name, stat in (("p50", p50), ("p99", p99),
                            ("mean", lambda s: statistics.mean(s) * 1000)):
        ratio_line(f"write 50 at the cap {stat_name}", "raw insert",
                   [(stat(at_cap[k:k + per_round]), stat(inserted[k:k + per_round]))
                    for k in range(0, len(at_cap), per_round)])
        print(f"   {'':<40}{stat(at_cap):10.2f} ms    vs {'(all batches)':<26}"
              f"{stat(inserted):10.2f} ms    = {stat(at_cap) / stat(inserted):5.2f}x")
    raw_target.close()
    raw.close()
    await beside.close()


# --- main ---------------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> None:
    began = time.perf_counter()
    zipf = Zipf()
    briefs = [zipf.brief() for _ in range(400)]
    texts = [zipf.record() for _ in range(2000)]
    print(f"scopemem load bench: {len(zipf.vocab):,}-word Zipf vocabulary (s = 1.07), "
          f"{os.cpu_count()} CPUs, {args.rounds} rounds of {args.seconds:g} s per case")
    with tempfile.TemporaryDirectory(prefix="scopemem-load-") as tmp:
        data = os.path.join(tmp, "scopes")
        figures = args.figures
        # The raw FTS5 baselines: a directory of their own holding the same records.
        raw_data = os.path.join(tmp, "raw-fts")
        written, context_keys = await seed(data, raw_data, zipf, args.scope_counts, args.large,
                                           figures)
        if figures & {1, 2, 4}:
            async with serve(data) as (url, port):
                if 1 in figures:
                    await many_scopes(url, port, args, briefs, texts)
                if 2 in figures:
                    await head_of_line(url, args, zipf, briefs)
                if 4 in figures:
                    await per_turn(url, args, briefs, context_keys, data, raw_data)
        if 1 in figures:
            await syscalls(data, args, briefs, texts)
        if figures & {3, 5, 6}:
            await in_process(data, raw_data, args, zipf, briefs, written)
    print(f"\nthe whole run took {time.perf_counter() - began:.0f} s")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 10 and 1,000 scopes, 2,000 records, short rounds")
    parser.add_argument("--scopes", default=None,
                        help="scope counts of figure 1, the first the baseline "
                             "(default 10,1000,10000)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="seconds per case per round (default 2)")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--large", type=int, default=None,
                        help="records in the large scope (default 10000)")
    parser.add_argument("--batches", type=int, default=100,
                        help="batches of 50 written at the cap (figure 3)")
    parser.add_argument("--after-writes", type=int, default=100,
                        help="retrievals after a write per case per round (figure 3)")
    parser.add_argument("--cache-rows", type=int, default=None,
                        help="the SQLite store's cache_rows in every store measured "
                             "(0: no copies in memory; default: the store's default)")
    parser.add_argument("--heavy", choices=("mixed", "common", "long"), default="mixed",
                        help="figure 2's heavy queries: both kinds (default), only the 24 "
                             "commonest words, or only 300-word briefs")
    parser.add_argument("--only", default="1,2,3,4,5,6",
                        help="the figures to run, comma-separated (default all: 1,2,3,4,5,6)")
    args = parser.parse_args(argv)
    quick = args.quick
    args.scopes = args.scopes or ("10,1000" if quick else "10,1000,10000")
    args.rounds = args.rounds or (2 if quick else 3)
    args.seconds = args.seconds or (0.5 if quick else 2.0)
    args.large = args.large or (2000 if quick else MAX_SCOPE_CAP)
    if quick:
        args.batches = min(args.batches, 20)
        args.after_writes = min(args.after_writes, 20)
    args.scope_counts = [int(n) for n in args.scopes.split(",")]
    try:
        args.figures = frozenset(int(n) for n in args.only.split(","))
    except ValueError:
        args.figures = frozenset({0})
    if (not args.figures <= {1, 2, 3, 4, 5, 6} or args.clients < 2 or args.rounds < 1
            or args.seconds <= 0 or args.large < 50 or args.batches < 1 or args.after_writes < 1
            or not all(n > 0 for n in args.scope_counts)):
        parser.error("--clients must be at least 2; counts and seconds above zero; "
                     "--large at least 50; --only names figures 1 to 6")
    return args


if __name__ == "__main__":
    ARGS = parse_args()
    CACHE_ROWS = ARGS.cache_rows
    asyncio.run(main(ARGS))
