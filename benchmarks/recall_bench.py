"""Does retrieval find the evidence? Recall on a conversational-memory benchmark (LoCoMo).

    python benchmarks/recall_bench.py [--data ../shared/data/locomo-dev.json] [--limit 10]
                                      [--stores memory,sqlite,worker] [--questions N]
                                      [--conversations 1-5 6-10]

The file is in LoCoMo's format: a list of conversations, each with ``conversation``
(``session_<n>`` lists of turns ``{speaker, dia_id, text}``) and ``qa`` (``{question,
evidence: [dia_id, …], category}``). Every dialog turn is written as one fact record
(``"<speaker>: <text>"``, its ``dia_id`` as ``sourceRunId``), one scope per conversation; then
every question is asked with ``retrieve(scope, question, limit)`` through each store (the
in-process store, SQLite, and the worker client against a live worker on 127.0.0.1 serving
SQLite). For each it prints R@5 and R@10 (the share of a question's evidence turns among the
top k, averaged over all questions, adversarial ones included), per question category and
overall, and the median query time.

In the same run, on the same rows: the seed's scorer (``memory.ranking = "seed"``), and a
baseline: a raw FTS5 bm25 query (``porter unicode61``
tokenizer, English function words dropped from the question, OR of the rest). The clock is
fixed, so recency is the same for every record and only the keyword term ranks.

The data set is read from ``../shared/data`` (conversations 1–5, the dev half the defaults
were chosen on), never copied into the project. The held-out half is conversations 6–10 of
the public file, ``data/locomo10.json`` of github.com/snap-research/LoCoMo, read from
wherever it was put (``--data /tmp/locomo10.json --conversations 1-5 6-10`` measures both
halves in one run, each apart). Nothing here asserts: it prints figures.

Path measured: ``retrieve``'s quality (recall) through each store, one question at a time,
one scope per conversation. It measures no load and does not go through
``Memory.context_block``; its query times are single-client medians.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scopemem import MemoryConfig  # noqa: E402
from scopemem.api.semantic import SemanticLane, fused_hits  # noqa: E402
from scopemem.core.fusion import SEMANTIC_SHARE  # noqa: E402
from scopemem.core.ranking import SEED, Ranking  # noqa: E402
from scopemem.core.records import MAX_SCOPE_CAP, Candidate, Kind, Record  # noqa: E402
from scopemem.languages import analyzer_for  # noqa: E402
from scopemem.stores.base import DEFAULT_RANKING, MemoryStore, search_hits  # noqa: E402
from scopemem.stores.memory import InMemoryStore  # noqa: E402
from scopemem.stores.sqlite_shared import SharedSqliteStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo-dev.json"
NOW = 1_790_000_000_000
TOKEN = "recall-bench-token"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop",
              5: "adversarial"}
# English function words, for the bm25 baseline only (the baseline the issue names drops
# them; the stores' own treatment of such words is what is being measured).
_FUNCTION_WORDS = """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its
itself just me more most my myself no nor not now of off on once only or other our ours
ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself yourselves
"""
BASELINE_STOPWORDS = frozenset(_FUNCTION_WORDS.split())
_WORD = re.compile(r"\w+")


class Conversation:
    def __init__(self, data: dict[str, Any]) -> None:
        self.name = str(data.get("sample_id", "conversation"))
        self.scope = "org:locomo-" + re.sub(r"[^A-Za-z0-9_-]+", "-", self.name)
        self.turns: list[tuple[str, str]] = []  # (dia_id, "speaker: text")
        for key, value in data["conversation"].items():
            if re.fullmatch(r"session_\d+", key) and isinstance(value, list):
                for turn in value:
                    text = str(turn.get("text", "")).strip()
                    if text:
                        self.turns.append((str(turn["dia_id"]), f"{turn['speaker']}: {text}"))
        self.questions: list[tuple[str, set[str], int]] = []
        for qa in data.get("qa", []):
            evidence = {part for item in qa.get("evidence", [])
                        for part in re.split(r"[;,\s]+", str(item)) if part}
            if evidence and qa.get("question"):
                self.questions.append((str(qa["question"]), evidence, int(qa.get("category", 0))))


def load(path: Path) -> list[Conversation]:
    with path.open(encoding="utf-8") as handle:
        return [Conversation(item) for item in json.load(handle)]


def groups(conversations: list[Conversation], ranges: list[str] | None
           ) -> list[tuple[str, list[Conversation]]]:
    """The conversations measured apart: one group per range of 1-based positions in the
    file (``6-10``, ``3``), or the whole file as one group."""
    if not ranges:
        return [("all", conversations)]
    chosen = []
    for text in ranges:
        first, _, last = text.partition("-")
        try:
            start, end = int(first), int(last or first)
        except ValueError:
            raise SystemExit(f"--conversations: {text!r} is not a range such as 6-10") from None
        if not 1 <= start <= end <= len(conversations):
            raise SystemExit(f"--conversations: {text!r} is outside 1-{len(conversations)}")
        chosen.append((f"conversations {text}", conversations[start - 1:end]))
    return chosen


def candidates(conversation: Conversation) -> list[Candidate]:
    return [Candidate(kind=Kind.FACT, text=text, source_thread_key=conversation.name,
                      source_run_id=dia_id) for dia_id, text in conversation.turns]


async def fill(store: MemoryStore, conversations: Iterable[Conversation]) -> None:
    for conversation in conversations:
        batch = candidates(conversation)
        for start in range(0, len(batch), 50):
            await store.write(conversation.scope, batch[start:start + 50], cap=MAX_SCOPE_CAP)


Ask = Callable[[Conversation, str, int], Awaitable[list[str]]]


def store_asker(store: MemoryStore) -> Ask:
    async def ask(conversation: Conversation, question: str, limit: int) -> list[str]:
        records: list[Record] = await store.retrieve(conversation.scope, question, limit)
        return [record.source_run_id or "" for record in records]

    return ask


def hybrid_asker(store: MemoryStore, lane: SemanticLane, pool: int) -> Ask:
    """The read ``Memory`` makes with the semantic lane, one scope: the ``pool`` best keyword
    hits and the ``pool`` nearest records at the floor or above, fused (``core.fusion``)."""
    async def ask(conversation: Conversation, question: str, limit: int) -> list[str]:
        vector = asyncio.ensure_future(lane.query(question))
        hits = await search_hits(store, conversation.scope, question, pool, bump=False)
        pooled, cosines = await lane.read(store, conversation.scope, hits, vector, pool)
        ranked = fused_hits(pooled, cosines or {}, lane.fusion, 0.0, NOW)
        return [hit.record.source_run_id or "" for hit in ranked[:limit]]

    return ask


def bm25_asker(conversations: list[Conversation]) -> Ask:
    import apsw

    conn = apsw.Connection(":memory:")
    conn.execute("CREATE VIRTUAL TABLE turns USING fts5(scope UNINDEXED, dia UNINDEXED, text,"
                 " tokenize = 'porter unicode61')")
    with conn:
        for conversation in conversations:
            conn.executemany("INSERT INTO turns (scope, dia, text) VALUES (?, ?, ?)",
                             [(conversation.scope, dia, text)
                              for dia, text in conversation.turns])

    async def ask(conversation: Conversation, question: str, limit: int) -> list[str]:
        words = [w.lower() for w in _WORD.findall(question)]
        kept = [w for w in words if w not in BASELINE_STOPWORDS] or words
        if not kept:
            return []
        match = " OR ".join(f'"{word}"' for word in dict.fromkeys(kept))
        return [dia for (dia,) in conn.execute(
            "SELECT dia FROM turns WHERE turns MATCH ? AND scope = ? ORDER BY bm25(turns)"
            " LIMIT ?", (match, conversation.scope, limit))]

    return ask


def recall(found: list[str], evidence: set[str], k: int) -> float:
    return len(evidence & set(found[:k])) / len(evidence)


async def measure(name: str, ask: Ask, conversations: list[Conversation], limit: int,
                  questions: int | None) -> None:
    by_category: dict[str, list[tuple[float, float]]] = defaultdict(list)
    times: list[float] = []
    asked = 0
    for conversation in conversations:
        for question, evidence, category in conversation.questions:
            if questions is not None and asked >= questions:
                break
            asked += 1
            start = time.perf_counter()
            found = await ask(conversation, question, limit)
            times.append(time.perf_counter() - start)
            by_category[CATEGORIES.get(category, str(category))].append(
                (recall(found, evidence, 5), recall(found, evidence, 10)))
    every = [pair for pairs in by_category.values() for pair in pairs]
    r5 = statistics.fmean(p[0] for p in every)
    r10 = statistics.fmean(p[1] for p in every)
    detail = ", ".join(f"{category} {statistics.fmean(p[0] for p in pairs):.2f}/"
                       f"{statistics.fmean(p[1] for p in pairs):.2f}"
                       for category, pairs in sorted(by_category.items()))
    print(f"{name:<32} R@5 {r5:.3f}  R@10 {r10:.3f}  p50 {statistics.median(times) * 1000:6.2f} ms"
          f"  n = {len(every)}")
    print(f"{'':<32} per category (R@5/R@10): {detail}")


@contextlib.asynccontextmanager
async def built(kind: str, directory: str, ranking: Ranking) -> AsyncIterator[MemoryStore]:
    clock = lambda: NOW  # noqa: E731 - one fixed instant: recency never ranks
    if kind == "memory":
        yield InMemoryStore(cap=MAX_SCOPE_CAP, clock=clock, ranking=ranking)
        return
    backing = SharedSqliteStore(os.path.join(directory, kind), cap=MAX_SCOPE_CAP, clock=clock,
                                synchronous="off", ranking=ranking)
    if kind == "sqlite":
        try:
            yield backing
        finally:
            await backing.close()
        return
    from scopemem.stores.worker import WorkerStore
    from scopemem.worker_aiohttp.app import create_app, running

    async with running(create_app(backing, TOKEN), access_log=None) as url:
        client = WorkerStore(url, TOKEN, cap=MAX_SCOPE_CAP, timeout=30)
        try:
            yield client
        finally:
            await client.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--stores", default="memory,sqlite,worker")
    parser.add_argument("--conversations", nargs="+", metavar="RANGE",
                        help="1-based ranges of the file's conversations, each measured apart "
                        "(default: the whole file, one group)")
    parser.add_argument("--questions", type=int, default=None,
                        help="ask at most this many questions per method (default all)")
    parser.add_argument("--languages", default=",".join(DEFAULT_RANKING.analyzer.languages),
                        help="memory.languages, comma-separated (default english)")
    parser.add_argument("--semantic", choices=("both", "off", "only"), default="both",
                        help="the keyword stores, the semantic lane (in-process), or both")
    parser.add_argument("--floor", type=float, default=MemoryConfig().embeddings_floor)
    parser.add_argument("--share", type=float, default=SEMANTIC_SHARE)
    parser.add_argument("--model", choices=("all-MiniLM-L6-v2", "all-mpnet-base-v2",
                                                 "all-mpnet-base-v2-int8"),
                        default="all-MiniLM-L6-v2",
                        help="the lane's model (benchmarks/semantic.py MODELS)")
    parser.add_argument("--pool", type=int, default=50,
                        help="keyword hits and dense candidates fused (default 50: the "
                        "ranking's candidate cap at limit 10)")
    args = parser.parse_args()
    ranking = Ranking(analyzer_for(tuple(args.languages.split(","))))
    if not args.data.is_file():
        raise SystemExit(f"no data file at {args.data} (pass --data)")
    conversations = load(args.data)
    halves = groups(conversations, args.conversations)
    conversations = list(dict.fromkeys(c for _name, group in halves for c in group))
    turns = sum(len(c.turns) for c in conversations)
    asked = sum(len(c.questions) for c in conversations)
    print(f"{args.data.name}: {len(conversations)} conversations, {turns} turns, "
          f"{asked} questions with evidence; limit {args.limit}; ranking weighted, "
          f"languages {', '.join(ranking.analyzer.languages)}")
    if args.semantic != "off":
        from semantic import lane as semantic_lane

        store = InMemoryStore(cap=MAX_SCOPE_CAP, clock=lambda: NOW, ranking=ranking)
        await fill(store, conversations)
        pool = args.pool
        lexical = store_asker(store)
        lane = semantic_lane(args.floor, 0.0, args.share, model=args.model)
        for conversation in conversations:
            await lane.embed_missing(store, conversation.scope)
        hybrid = hybrid_asker(store, lane, pool)
        for group, chosen in halves:
            await measure(f"keyword (memory), {group}", lexical, chosen, args.limit,
                          args.questions)
            await measure(f"hybrid, {group}", hybrid, chosen, args.limit, args.questions)
        print(f"hybrid: local/{args.model}, floor {args.floor:g}, cosine share {args.share:g}, "
              f"pool {pool}; the embedder took "
              f"{lane.embedder.seconds:.1f} s for "  # type: ignore[attr-defined]
              f"{lane.embedder.texts} new texts (cached)")  # type: ignore[attr-defined]
        if args.semantic == "only":
            return
    with tempfile.TemporaryDirectory(prefix="scopemem-recall-") as directory:
        for kind in [name.strip() for name in args.stores.split(",") if name.strip()]:
            async with built(kind, directory, ranking) as store:
                await fill(store, conversations)
                for group, chosen in halves:
                    await measure(f"store {kind}, {group}", store_asker(store), chosen,
                                  args.limit, args.questions)
    # The seed's scorer on the same rows (memory.ranking = "seed"), through the in-process
    # store: every store ranks alike, so one shows it.
    seed = InMemoryStore(cap=MAX_SCOPE_CAP, clock=lambda: NOW, ranking=SEED)
    await fill(seed, conversations)
    bm25 = bm25_asker(conversations)
    for group, chosen in halves:
        await measure(f"seed scorer (memory), {group}", store_asker(seed), chosen, args.limit,
                      args.questions)
        await measure(f"baseline bm25 (porter), {group}", bm25, chosen, args.limit,
                      args.questions)


if __name__ == "__main__":
    asyncio.run(main())
