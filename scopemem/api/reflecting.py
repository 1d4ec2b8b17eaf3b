"""Reflection, the host half: one extractor call per finished run, then screen, route,
authorize and write.

Routing: each fact goes to the scope its audience names when the run has it, else to org;
the audiences are the registered scope kinds (a plugin's ``guild`` included). A fact that
supersedes or restates a shown record follows that record's scope whatever its tag.
Authorization may then narrow a write (a narrowed correction loses its pointer, so a merge
never crosses a visibility line) or deny it; never widen it. One ``write`` per target scope,
one ``[memory]`` line per reflection with the counters and never a fact's text.

Nothing a run learned is lost to one failure: a scope whose records cannot be read for the
extractor costs those records and one warning; a batch the store refuses as a whole is
written again one candidate at a time, so one bad candidate costs only itself.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Protocol

import attrs

from scopemem import secrets, tracing
from scopemem.api.finished_run import ReflectionReport, Run, run_label
from scopemem.api.semantic import SemanticLane, embed_written
from scopemem.config import MemoryConfig
from scopemem.core import counters
from scopemem.core.policy import AUDIENCE_KINDS, Audience, RunActor
from scopemem.core.records import Candidate, Kind, Record, WriteCounts
from scopemem.core.reflection import (
    MAX_OUTPUT_TOKENS,
    SHOWN_PER_SCOPE,
    Reflected,
    ReflectionRejected,
    audience_order,
    build_reflection_input,
    parse_reflection,
    reflection_system,
    should_reflect,
)
from scopemem.core.requests import Request, ScopeKind, request_scope_keys, resolved
from scopemem.core.scopes import order_scope_keys, scope_kind
from scopemem.errors import StoreRefused
from scopemem.plugins import host
from scopemem.plugins.manager import PluginManager
from scopemem.plugins.providers import Provider
from scopemem.stores.base import MemoryStore, check_answer
from scopemem.stores.counting import CountBuffer

log = logging.getLogger("scopemem")

SKIPPED_NO_MEMORY = "no_memory"


class ReflectionHost(Protocol):
    """What reflection needs of the installation it runs in (``Memory`` is one). A protocol,
    so this module never imports the facade that schedules it."""

    config: MemoryConfig
    store: MemoryStore
    pm: PluginManager
    scope_kinds: dict[str, ScopeKind]
    breadth: dict[str, int]
    counters: CountBuffer  # what reflection offered, rejected, ran, skipped and failed
    semantic: SemanticLane | None  # the semantic lane, which embeds what is written

    def reflection_model(self, run_model: str | None) -> tuple[Provider | None, str]: ...

    async def resolve_repo(self, repo: str | Awaitable[str | None] | None) -> str | None: ...

    def scope_keys(self, request: Request) -> list[str]: ...


async def shown_records(memory: ReflectionHost, keys: Sequence[str], query: str
                        ) -> tuple[list[Record], int]:
    """What the extractor is shown, and how many reads failed: per scope, up to
    ``SHOWN_PER_SCOPE`` records the run's own request and answer match (retrieval, which
    bumps them: a record the transcript matched was used), plus the repository window as
    the run saw it (a view: no bump). A read that fails costs its records and one
    ``[memory]`` warning, as on the read path; the reflection goes on."""
    shown: dict[str, Record] = {}
    failed = 0
    window = memory.config.repo_window
    for key in keys:
        reads: list[tuple[str, Callable[[], Awaitable[list[Record]]]]] = []
        if scope_kind(key) == "repo" and window > 0:
            reads.append(("repository window",
                          functools.partial(memory.store.list, key, window, kind=Kind.FACT)))
        reads.append(("retrieve",
                      functools.partial(memory.store.retrieve, key, query, SHOWN_PER_SCOPE)))
        for what, read in reads:
            try:
                records = await read()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failed += 1
                log.warning("[memory] reflection: %s of %s failed, showing the extractor "
                            "nothing from it: %s", what, key, exc)
                continue
            for record in records:
                if what == "retrieve" or record.kind == Kind.FACT:
                    shown.setdefault(record.id, record)
    return list(shown.values()), failed


def _route(item: Reflected, actor: RunActor, org_key: str, shown: Mapping[str, str],
           refused: Collection[str] = ()) -> str | None:
    """The scope ``item`` is headed for: its pointer's, its audience's, else org (a request
    that names nobody); None for the audience of a person or channel the request named but
    whose scope was refused (``slack:``, ``user:slack:U1``), which org would show to all."""
    pointer = item.candidate.supersedes or item.candidate.restates
    if pointer and pointer in shown:
        return shown[pointer]
    if item.audience in refused:
        return None
    return actor.scope(item.audience) or org_key


def _refused_kinds(request: Request, actor: RunActor) -> frozenset[str]:
    """The narrow audiences (user, channel) the request names an id for, but has no scope
    of: the id was refused, so the run is not one that names nobody."""
    given = {AUDIENCE_KINDS[Audience.PERSON]: request.user_id,
             AUDIENCE_KINDS[Audience.ORIGIN]: request.channel_id}
    return frozenset(kind for kind, value in given.items()
                     if value and value.strip() and actor.scope(kind) is None)


async def reflect(memory: ReflectionHost, run: Run) -> ReflectionReport | None:
    """Distill one run. Returns the report, or ``None`` when the run does not qualify or no
    model could be used. Raises on provider failure; the scheduler catches.

    Traced as a ``reflection`` span with children ``reflection.model``, ``reflection.gate``
    and one ``reflection.write`` per scope written (``scopemem.tracing``)."""
    with tracing.span("reflection") as span:
        report = await _reflect(memory, run)
        span.set_attribute("outcome", "skipped" if report is None or report.skipped
                           else "reflected")
        if report is not None:
            span.set_attributes({"facts.offered": report.offered,
                                 "facts.rejected": report.rejected,
                                 "records.inserted": report.counts.inserted,
                                 "writes.failed": report.failed_writes})
        return report


async def _reflect(memory: ReflectionHost, run: Run) -> ReflectionReport | None:
    config = memory.config
    if not should_reflect(run.tool_calls, len(run.history), run.agent_name,
                          config.no_reflect_agents):
        await _count_skip(memory, run)
        return None
    if run.opted_out:
        await _count_skip(memory, run)
        report = ReflectionReport(run_id=run.run_id, skipped=SKIPPED_NO_MEMORY)
        log.info("%s", report.log_line())
        return report
    provider, model = memory.reflection_model(run.model)
    if provider is None:
        await _count_skip(memory, run)
        return None

    repo = await memory.resolve_repo(run.request.repo)
    keys = memory.scope_keys(resolved(run.request, repo))
    actor = RunActor({scope_kind(key): key for key in keys})
    org_key = actor.scope("org")
    if org_key is None:
        log.warning("[memory] reflection skipped: the run has no org scope")
        return None
    # How the reflection ends is counted at the run's home scope: its repository, else org.
    home = actor.scope("repo") or org_key

    shown, failed_reads = await shown_records(memory, keys, f"{run.request.text}\n{run.answer}")
    audiences = audience_order(memory.breadth)
    hints = {name: kind.description for name, kind in memory.scope_kinds.items()
             if kind.description}
    try:
        with tracing.span("reflection.model", {"records.shown": len(shown)}):
            raw = await provider.complete(
                model=model,
                system=reflection_system(audiences, hints),
                user=build_reflection_input(shown, run.history, run.request.text, run.answer,
                                            redact=secrets.redact),
                max_tokens=MAX_OUTPUT_TOKENS,
            )
    except Exception:
        _count(memory, home, {counters.REFLECTIONS_FAILED: 1})
        raise
    report = ReflectionReport(run_id=run.run_id, failed_reads=failed_reads)
    try:
        reflection = parse_reflection(raw, shown_ids={r.id for r in shown},
                                      thread_key=run.thread_key, run_id=run.run_id,
                                      audiences=audiences, redact=secrets.redact)
    except ReflectionRejected as exc:
        _count(memory, home, {counters.REFLECTIONS_FAILED: 1})
        log.warning("[memory] reflection %s rejected: %s", run_label(run.run_id), exc)
        return report
    _count(memory, home, {counters.REFLECTIONS_RUN: 1})
    report.offered = len(reflection.facts)
    report.dropped = reflection.dropped
    report.dropped_reasons.update(reflection.drop_reasons)

    shown_scopes = {record.id: record.scope_key for record in shown}
    no_scope = _refused_kinds(run.request, actor)
    items: list[Reflected] = []
    refused = 0  # candidates the gate refused, a noise summary included
    with tracing.span("reflection.gate") as gate:
        for item in (*reflection.facts, *([reflection.summary] if reflection.summary else [])):
            screened = host.screen_candidate(memory.pm, config, item.candidate)
            if item.candidate.kind == Kind.FACT:
                # Offers and rejections count where the fact was headed (before authorization),
                # beside what the store counts there, so a scope's rejected share reads whole.
                _count(memory, _route(item, actor, org_key, shown_scopes, no_scope),
                       _screen_counts(screened.markers if screened.rejected else None))
            elif screened.rejected:  # a summary is never gated: only noise refuses one
                _count(memory, _route(item, actor, org_key, shown_scopes, no_scope),
                       {counters.rejected_by(marker): 1 for marker in screened.markers})
            if screened.rejected:
                refused += 1
                # The line's and the span's "rejected" count offered facts, as the
                # counters do: a summary is no offer (docs/stats.md).
                if item.candidate.kind == Kind.FACT:
                    report.rejected += 1
            else:
                items.append(attrs.evolve(item, candidate=screened.candidate))
        gate.set_attributes({"candidates": len(items) + refused,
                             "candidates.rejected": refused})

    batches: dict[str, list[Candidate]] = {}
    for item in items:
        target = _route(item, actor, org_key, shown_scopes, no_scope)
        if target is None:
            report.denied[f"{item.audience}_scope_refused"] += 1
            continue
        decision = host.authorize_write(
            memory.pm, actor=actor, target=target, candidate=item.candidate,
            origin=run.request.channel_visibility, breadth=memory.breadth,
        )
        if decision.scope_key is None:
            report.denied[decision.reason or "denied"] += 1
            continue
        candidate = item.candidate
        if decision.scope_key != target:
            report.narrowed[decision.reason or "narrowed"] += 1
            candidate = attrs.evolve(candidate, supersedes=None, restates=None)
        if candidate.kind == Kind.SUMMARY:
            report.summary += 1
        batches.setdefault(decision.scope_key, []).append(candidate)

    written = order_scope_keys(batches, memory.breadth)  # widest first, as on the line
    for key in written:
        candidates = batches[key]
        with tracing.span("reflection.write", tracing.scope_attributes(
                key, config.tracing.scope_keys)) as write:
            counts, failed, unavailable = await _write_scope(memory, key, candidates)
            write.set_attributes({"candidates": len(candidates), "candidates.failed": failed,
                                  "records.inserted": counts.inserted})
        report.counts += counts
        report.by_scope[key] = counts
        report.failed_writes += failed
        report.unavailable_writes += failed if unavailable else 0
        report.written[key] = len(candidates) - failed
    log.info("%s", report.log_line())
    # Every scope is written before any is embedded: a slow embedder, or a drain's deadline
    # meanwhile, costs vectors (a backfill's work), never a lesson.
    for key in written:
        await embed_written(memory.semantic, memory.store, key)
    return report


def _count(memory: ReflectionHost, scope_key: str | None, deltas: Mapping[str, int]) -> None:
    if scope_key is not None:
        memory.counters.add(scope_key, deltas)


async def _count_skip(memory: ReflectionHost, run: Run) -> None:
    """A run that is not reflected, counted at its home scope (its repository, else org;
    the read path has resolved the repository already, and a refused scope was warned of
    there)."""
    repo = await memory.resolve_repo(run.request.repo)
    keys, _refused = request_scope_keys(memory.scope_kinds, resolved(run.request, repo))
    kinds = {scope_kind(key): key for key in keys}
    _count(memory, kinds.get("repo") or kinds.get("org"), {counters.REFLECTIONS_SKIPPED: 1})


def _screen_counts(markers: Sequence[str] | None) -> dict[str, int]:
    """One fact offered, and when ``markers`` (it was rejected) one rejection and one per
    marker that tripped."""
    if markers is None:
        return {counters.OFFERED: 1}
    return {counters.OFFERED: 1, counters.REJECTED: 1,
            **{counters.rejected_by(marker): 1 for marker in dict.fromkeys(markers)}}


async def _write_scope(memory: ReflectionHost, key: str, candidates: list[Candidate]
                       ) -> tuple[WriteCounts, int, bool]:
    """Write one scope's batch; the counts, how many candidates were lost, and whether they
    were lost to a store that failed rather than refused them. A batch the
    store refuses as a whole (``StoreRefused``) is written again one candidate at a time, so
    only the candidates refused on their own are lost; any other failure loses the batch
    (the store is unreachable: one at a time would fail the same way). One scope's failure
    never touches another's."""
    try:
        return check_answer("write", await memory.store.write(key, candidates)), 0, False
    except asyncio.CancelledError:
        raise
    except StoreRefused as exc:
        if len(candidates) == 1:
            log.warning("[memory] reflection write to %s refused: %s", key, exc)
            return WriteCounts(), 1, False
        log.warning("[memory] reflection write to %s refused (%s); writing its %d "
                    "candidates one at a time", key, exc, len(candidates))
    except Exception as exc:  # one scope's failure must not lose the others' writes
        log.warning("[memory] reflection write to %s failed: %s", key, exc)
        return WriteCounts(), len(candidates), True
    counts, failed = WriteCounts(), 0
    for candidate in candidates:
        try:
            counts += check_answer("write", await memory.store.write(key, [candidate]))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failed += 1
            log.warning("[memory] reflection write to %s: a %s candidate was refused: %s",
                        key, candidate.kind.value, exc)
    return counts, failed, False
