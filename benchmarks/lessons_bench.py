"""Does the right lesson reach the run? Lesson-in-prompt on a product-shaped set.

    python benchmarks/lessons_bench.py [--store memory|sqlite] [--set dev|held-out|both]
                                       [--min-match X] [--ranking weighted|seed]
                                       [--repo-window N] [--limit N]
                                       [--languages english,german,...]

A set written as the extractor writes lessons: an organisation, three repositories, two
channels and three people, each scope holding its target lessons among many others (other
teams' lessons, status-free noise facts, thread summaries interleaved), with every
repository holding far more than its 24-fact window, so most of its target lessons are
older than the window. Each brief is labelled with the lessons an engineer would want in
front of that run, and has a kind:

* ``one-liner``   a short brief sharing at least one word (stem) with its target;
* ``paraphrase``  the same need in other words, sharing at most two stems, often none;
* ``pasted-log``  a log or stack trace pasted into the brief, the relevant line (sharing
  at least one stem with the target) among forty routine ones;
* ``no-target``   a brief nothing in memory is relevant to, in two sets (below).

The topics (``lessons_topics.py``) also make two classes across the kinds: ``other scope``,
the English briefs whose target lives in the organisation's, the channel's or the person's
scope, and ``multilingual``, German and Spanish topics (lessons and briefs), to read with
``--languages english,german,spanish``. The kinds' figures count English briefs only.

The briefs with no target:

  - ``plain``: ten everyday questions (a recipe, a haiku) that share no engineering word
    with the records, the same ten for both halves;
  - ``shared words``: engineering briefs about a component no record mentions (the
    loyalty points service, the tram timetable job), written with the common words real
    briefs share with the records (deploy, test, build, config, restart, team ...), ten
    for ``dev`` and ten for ``held-out``. They are irrelevant by construction, and
    ``check_no_target`` verifies it before a run, under the run's own word rules: every
    content word of such a brief is either one of ``SHARED_WORDS`` or a word that no record
    of either half holds (no lesson, keyword, noise fact or summary), and each brief holds
    at least two shared words that its half's records hold. ``SHARED_WORDS`` are generic:
    none is a topic's keyword, so what a brief shares with the records is never what a
    lesson is about.

Every brief goes through ``Memory.context_block`` with the configured store, and the script
prints per kind the lesson-in-prompt rate (the share of target lessons that are in the
block), the share of the run's repository window (its newest ``repo_window`` facts) that is
in the block (003 wants all of it), and, for each set of briefs with no target, the unrelated
bullets per brief (bullets beyond the repository window, which a run with this brief gets
by design). The topics come in two
halves: ``dev`` (what the defaults were chosen on) and ``held-out`` (measured, not tuned
on). Nothing here asserts: it prints figures.

Path measured: the per-turn read, ``Memory.context_block``, for what reaches the prompt, in
process on the in-memory or SQLite store. It times nothing and never goes over the worker;
``load_bench.py`` times that read.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lessons_topics import (  # noqa: E402
    MULTILINGUAL_DEV,
    MULTILINGUAL_HELD_OUT,
    OTHER_SCOPE_DEV,
    OTHER_SCOPE_HELD_OUT,
    TOPICS_DEV,
    TOPICS_HELD_OUT,
)

from scopemem import Memory, MemoryConfig, Request  # noqa: E402
from scopemem.api.semantic import SemanticLane  # noqa: E402
from scopemem.core.fusion import SEMANTIC_SHARE  # noqa: E402
from scopemem.core.records import Candidate, Kind  # noqa: E402
from scopemem.core.words import Analyzer  # noqa: E402
from scopemem.languages import analyzer_for  # noqa: E402
from scopemem.stores.base import DEFAULT_RANKING  # noqa: E402
from scopemem.stores.memory import InMemoryStore  # noqa: E402
from scopemem.stores.sqlite_shared import SharedSqliteStore  # noqa: E402

ORG = "acme"
REPOS = ("acme/api", "acme/web", "acme/infra")
CHANNELS = ("slack:C100", "slack:C200")
USERS = ("slack:U1", "slack:U2", "slack:U3")
NOW = 1_790_000_000_000
MINUTE = 60_000


class Clock:
    """The time the stores and the facade read: moved forward while the scopes fill."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

NO_TARGET_BRIEFS = [
    "what is the capital of australia",
    "draft a birthday message for a colleague",
    "convert this recipe from cups to grams",
    "explain the difference between a list and a tuple",
    "recommend a good book about the history of mathematics",
    "how many weeks until the end of the quarter",
    "translate 'good morning' into Japanese",
    "what does the acronym laser stand for",
    "write a haiku about autumn leaves",
    "is it going to rain tomorrow in lisbon",
]

# Common engineering words real briefs share with the records; none is a topic's keyword.
SHARED_WORDS = ("deploy", "test", "build", "config", "restart", "check", "team", "change",
                "client", "library", "alert", "version", "job", "run", "fail", "update",
                "service", "need", "add", "owns", "break")

# Briefs about components no record mentions, in the shared words (see the docstring).
NO_TARGET_DEV = [
    "the deploy of the loyalty points service failed on the build step after a config change",
    "write a test for the parking sensor gateway and run it in the build",
    "restart the fleet radar after the deploy, its tests fail on startup",
    "the carbon calculator build breaks when I change its config",
    "which team owns the survey widget? its deploy check is failing",
    "move the coupon engine to the new client library version and run the tests again",
    "the chess engine job fails its test run after the deploy",
    "add an alert when the weather scraper build takes too long",
    "update the config of the lunch ordering kiosk and deploy it",
    "the podcast feed importer needs a config change before the next deploy",
]
NO_TARGET_HELD_OUT = [
    "the greenhouse sensor service fails the build check after a config change",
    "deploy the museum audio guide and run its tests",
    "the tram timetable job fails its tests since the last change",
    "which team owns the config of the pet adoption form",
    "restart the vending machine client after the deploy",
    "the ski pass scanner tests fail on the build server",
    "move the bike rental site to the new library version and run the checks",
    "add an alert for failed deploys of the poetry widget",
    "the karaoke booking build needs a config change before the deploy",
    "update the tests of the recycling planner after the client change",
]

# Lessons that are real but unrelated to every brief: the bulk of a scope.
NOISE_SUBJECTS = ("the search service", "the mobile app", "the reporting job", "the admin panel",
                  "the email sender", "the audit log", "the export worker", "the cache layer",
                  "the webhook relay", "the pdf renderer", "the queue consumer", "the sso bridge")
NOISE_RULES = ("keeps its config in {x}.toml", "is owned by the {y} team",
               "logs to the {y} index", "must be restarted after a {x} schema change",
               "reads feature toggles from {x}", "pins its {x} client library",
               "runs its checks with make {x}-check", "alerts in #{y}-alerts")
NOISE_WORDS = ("orbit", "falcon", "delta", "quartz", "harbor", "nimbus", "cobalt", "ember",
               "tundra", "juniper", "sierra", "mosaic")


SUMMARY_PREFIX = "Thread summary: a discussion of"


def noise(rng: random.Random, n: int) -> list[str]:
    lessons = []
    for i in range(n):
        rule = rng.choice(NOISE_RULES).format(x=rng.choice(NOISE_WORDS),
                                              y=rng.choice(NOISE_WORDS))
        lessons.append(f"{rng.choice(NOISE_SUBJECTS).capitalize()} {rule} ({n}-{i})")
    return lessons


def record_words(topics: Iterable[tuple[str, str, tuple[str, ...], str, str, str]]
                 ) -> Iterable[str]:
    """Every text a record of these topics' half can hold a word from: the lessons, their
    keywords, the noise facts' parts and the summaries' prefix."""
    for _where, lesson, keywords, *_briefs in topics:
        yield lesson
        yield from keywords
    yield from NOISE_SUBJECTS
    yield from (rule.format(x="", y="") for rule in NOISE_RULES)
    yield from NOISE_WORDS
    yield SUMMARY_PREFIX


def check_no_target(analyzer: Analyzer) -> None:
    """Raises ``SystemExit`` unless the shared-words briefs are irrelevant by construction:
    each of their content words is a shared word or in no record, with at least two shared
    words their half's records hold, and no shared word is a topic's keyword. A word is
    read as a query reads it: its stems, one under each language of its script; it is in a
    record when one of them is, a shared word when one of them is a shared word's."""
    def terms(texts: Iterable[str]) -> set[frozenset[str]]:
        return {frozenset(analyzer.stems(word)) for text in texts
                for word in analyzer.content_words(text)}

    def stems(texts: Iterable[str]) -> frozenset[str]:
        return frozenset().union(*terms(texts))

    dev, held_out = half_topics("dev"), half_topics("held-out")
    everywhere = stems(record_words(dev + held_out))
    shared = stems(SHARED_WORDS)
    keywords = stems(k for _w, _l, keys, *_b in dev + held_out for k in keys)
    problems = [f"shared word {stem!r} is a topic's keyword" for stem in shared & keywords]
    for topics, briefs in ((dev, NO_TARGET_DEV), (held_out, NO_TARGET_HELD_OUT)):
        held = stems(record_words(topics))
        for brief in briefs:
            words = terms((brief,))
            problems += [f"{brief!r}: {'/'.join(sorted(term))!r} is in a record"
                         for term in sorted(words, key=sorted)
                         if term & everywhere and not term & shared]
            if sum(bool(term & shared & held) for term in words) < 2:
                problems.append(f"{brief!r}: fewer than two shared words its records hold")
    if problems:
        raise SystemExit("no-target briefs not irrelevant by construction:\n"
                         + "\n".join(problems))


def half_topics(half: str) -> list[tuple[str, str, tuple[str, ...], str, str, str]]:
    """Every topic of a half: the repository set, then the other-scope and multilingual
    classes (``lessons_classes``), in that order (so the set's own briefs draw what they
    always drew)."""
    if half == "dev":
        return TOPICS_DEV + OTHER_SCOPE_DEV + MULTILINGUAL_DEV
    return TOPICS_HELD_OUT + OTHER_SCOPE_HELD_OUT + MULTILINGUAL_HELD_OUT


MULTILINGUAL = frozenset(lesson for _w, lesson, *_rest in MULTILINGUAL_DEV
                         + MULTILINGUAL_HELD_OUT)
KINDS = ("one-liner", "paraphrase", "pasted-log")


def classes_of(where: str, lesson: str, kind: str) -> tuple[str, ...]:
    """The classes a brief counts in: its kind (English briefs only, so a kind's figure
    compares across ``--languages``), ``other scope`` when its English target lives outside
    the repository, ``multilingual`` for the German and Spanish topics."""
    if lesson in MULTILINGUAL:
        return ("multilingual",)
    return (kind,) if where.startswith("repo") else (kind, "other scope")


def scope_key(where: str) -> str:
    kind, _, index = where.partition(":")
    if kind == "org":
        return f"org:{ORG}"
    table = {"repo": REPOS, "channel": CHANNELS, "user": USERS}[kind]
    return f"{kind}:{table[int(index)]}"


def request_for(where: str, brief: str, rng: random.Random) -> Request:
    """The request a run for this target would make: its own repository, channel or person,
    the others drawn at random (so a brief meets other scopes' lessons too)."""
    kind, _, index = where.partition(":")
    repo = REPOS[int(index)] if kind == "repo" else rng.choice(REPOS)
    channel = CHANNELS[int(index)] if kind == "channel" else rng.choice(CHANNELS)
    user = USERS[int(index)] if kind == "user" else rng.choice(USERS)
    return Request(text=brief, user_id=user, channel_id=channel, repo=repo,
                   channel_visibility="public")


def pasted_log(line: str, rng: random.Random) -> str:
    """A brief with a pasted log: the relevant line among a screenful of routine lines."""
    routine = [f"[{rng.randint(10, 23)}:{rng.randint(10, 59)}:{rng.randint(10, 59)}] INFO "
               f"{rng.choice(('worker', 'http', 'db', 'cache'))} step {n} took "
               f"{rng.randint(1, 900)} ms" for n in range(40)]
    routine.insert(rng.randint(10, 30), line)
    return "this started failing, can you look?\n" + "\n".join(routine)


async def fill(memory: Memory, clock: Clock, topics: Iterable[tuple], rng: random.Random
               ) -> None:
    """Write every scope: its targets early, then many later lessons and summaries, so the
    targets of a repository lie beyond its window."""
    by_scope: dict[str, list[tuple[str, tuple[str, ...]]]] = defaultdict(list)
    for where, lesson, keywords, *_briefs in topics:
        by_scope[scope_key(where)].append((lesson, keywords))
    keys = {scope_key(f"repo:{n}") for n in range(3)} | {scope_key("org")}
    keys |= {scope_key(f"channel:{n}") for n in range(2)}
    keys |= {scope_key(f"user:{n}") for n in range(3)}
    clock.now = NOW - 90 * 24 * 60 * MINUTE
    for key in sorted(keys):
        later = 80 if key.startswith("repo:") else 30
        rows = [Candidate(kind=Kind.FACT, text=lesson, keywords=keywords,
                          source_thread_key=f"{key}/t{n}", source_run_id=f"r{n}")
                for n, (lesson, keywords) in enumerate(by_scope[key])]
        for n, text in enumerate(noise(rng, later)):
            rows.append(Candidate(kind=Kind.FACT, text=text, source_thread_key=f"{key}/n{n}"))
            if n % 10 == 0:
                rows.append(Candidate(kind=Kind.SUMMARY, source_thread_key=f"{key}/n{n}",
                                      text=f"{SUMMARY_PREFIX} {text.lower()}"))
        for start in range(0, len(rows), 10):
            clock.now += 6 * 60 * MINUTE
            await memory.store.write(key, rows[start:start + 10])


async def unrelated_bullets(memory: Memory, briefs: list[str], rng: random.Random,
                            repo_window: int) -> list[int]:
    """Per brief with no target, the bullets beyond its repository's window."""
    extra: list[int] = []
    for brief in briefs:
        request = request_for(rng.choice(("org", "repo:0", "repo:1", "repo:2")), brief, rng)
        context = await memory.context(request)
        window_texts = {r.text for r in await memory.store.list(f"repo:{request.repo}",
                                                                 repo_window, kind=Kind.FACT)}
        extra.append(sum(1 for text in bullet_texts(context.block)
                         if text not in window_texts))
        await memory.drain(timeout=10)  # as between the runs above: the same history
    return extra


async def measure(topics: list[tuple], no_target: list[str], args: argparse.Namespace,
                  name: str, lane: SemanticLane | None = None) -> None:
    rng = random.Random(13)
    config = MemoryConfig(enabled=True, organization=ORG, store=args.store,
                          min_match=args.min_match, ranking=args.ranking,
                          repo_window=args.repo_window, limit=args.limit,
                          languages=tuple(args.languages.split(",")))
    with tempfile.TemporaryDirectory(prefix="scopemem-lessons-") as tmp:
        ranking = config.ranking_spec()
        clock = Clock(NOW)
        store = (SharedSqliteStore(tmp, clock=clock, ranking=ranking) if args.store == "sqlite"
                 else InMemoryStore(clock=clock, ranking=ranking))
        memory = Memory(config, store, clock=clock, semantic=lane)
        await fill(memory, clock, topics, rng)
        if lane is not None:  # the vectors every write would have made (fill writes raw)
            for key in await store.export_scopes():
                await lane.embed_missing(store, key)
        clock.now = NOW
        took: list[float] = []
        found: dict[str, list[float]] = {name_: [] for name_ in
                                         (*KINDS, "other scope", "multilingual")}
        every: list[float] = []
        window: list[float] = []
        for where, lesson, _keywords, one_liner, paraphrase, log_line in topics:
            for kind, brief in (("one-liner", one_liner), ("paraphrase", paraphrase),
                                ("pasted-log", pasted_log(log_line, rng))):
                request = request_for(where, brief, rng)
                started = time.perf_counter()
                block = await memory.context_block(request)
                took.append(time.perf_counter() - started)
                for name_ in classes_of(where, lesson, kind):
                    found[name_].append(1.0 if lesson in block else 0.0)
                every.append(1.0 if lesson in block else 0.0)
                shown = set(bullet_texts(block))
                facts = await store.list(f"repo:{request.repo}", args.repo_window,
                                         kind=Kind.FACT)
                window.extend(1.0 if record.text in shown else 0.0 for record in facts)
                # The shown hits' use counts are saved before the next run reads, so every
                # store sees the same history.
                await memory.drain(timeout=10)
        # The plain briefs first, drawing what they always drew, so their figure compares.
        extra = {"plain": await unrelated_bullets(memory, NO_TARGET_BRIEFS, rng,
                                                  args.repo_window),
                 "shared words": await unrelated_bullets(memory, no_target, rng,
                                                         args.repo_window)}
        await store.close()
    print(f"{name:9s} lesson-in-prompt {sum(every) / len(every):.2f}  "
          + "  ".join(f"{kind} {sum(v) / len(v):.2f}" for kind, v in found.items() if v)
          + f"  | repository window shown {sum(window) / len(window):.2f}"
          + f"  | context_block p50 {statistics.median(took) * 1000:.2f} ms")
    for kind, counts in extra.items():
        print(f"{name:9s} no-target ({kind}): {sum(counts) / len(counts):.1f} unrelated "
              f"bullets per brief (max {max(counts)})")


def bullet_texts(block: str) -> list[str]:
    """The record texts a block shows, one per bullet."""
    return [line[2:].rsplit(" (source: ", 1)[0] for line in block.splitlines()
            if line.startswith("- ")]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("memory", "sqlite"), default="memory")
    parser.add_argument("--set", choices=("dev", "held-out", "both"), default="both")
    parser.add_argument("--min-match", type=float, default=MemoryConfig().min_match)
    parser.add_argument("--ranking", choices=("weighted", "seed"), default="weighted")
    parser.add_argument("--repo-window", type=int, default=MemoryConfig().repo_window)
    parser.add_argument("--limit", type=int, default=MemoryConfig().limit)
    parser.add_argument("--languages", default=",".join(DEFAULT_RANKING.analyzer.languages),
                        help="memory.languages, comma-separated (default english)")
    parser.add_argument("--semantic", choices=("both", "off", "only"), default="both",
                        help="measure the keyword read, the semantic lane, or both")
    parser.add_argument("--floor", type=float, default=MemoryConfig().embeddings_floor)
    parser.add_argument("--hit-floor", type=float, default=0.0,
                        help="the least cosine a keyword hit needs (measured, not applied)")
    parser.add_argument("--share", type=float, default=SEMANTIC_SHARE)
    parser.add_argument("--model", choices=("all-MiniLM-L6-v2", "all-mpnet-base-v2",
                                                 "all-mpnet-base-v2-int8"),
                        default="all-MiniLM-L6-v2",
                        help="the lane's model (benchmarks/semantic.py MODELS)")
    args = parser.parse_args()
    print(f"store {args.store}, ranking {args.ranking}, min_match {args.min_match:g}, "
          f"repo_window {args.repo_window}, limit {args.limit}, languages {args.languages}; "
          f"{len(half_topics('dev'))} + {len(half_topics('held-out'))} topics, 3 briefs each; "
          "briefs with no target: "
          f"{len(NO_TARGET_BRIEFS)} plain, {len(NO_TARGET_DEV)} + {len(NO_TARGET_HELD_OUT)} "
          "with shared words")
    check_no_target(analyzer_for(tuple(args.languages.split(","))))
    halves = [(half_topics("dev"), NO_TARGET_DEV, "dev"),
              (half_topics("held-out"), NO_TARGET_HELD_OUT, "held-out")]
    halves = [half for half in halves if args.set in (half[2], "both")]
    if args.semantic != "only":
        print("keyword read (memory.embeddings unset):")
        for topics, no_target, name in halves:
            await measure(topics, no_target, args, name)
    if args.semantic != "off":
        from semantic import lane as semantic_lane

        print(f"semantic lane (local/{args.model}, floor {args.floor:g}, hit floor "
              f"{args.hit_floor:g}, cosine share {args.share:g}):")
        for topics, no_target, name in halves:
            lane = semantic_lane(args.floor, args.hit_floor, args.share, model=args.model)
            await measure(topics, no_target, args, name, lane)
            embedder = lane.embedder
            print(f"{name:9s} embedder: {embedder.texts} new texts in "  # type: ignore
                  f"{embedder.seconds:.1f} s (cached on disk: run again to leave it out)")


if __name__ == "__main__":
    asyncio.run(main())
