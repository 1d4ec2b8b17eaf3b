"""Reflection, the host half: one extractor call per finished run, then gate, route,
authorize and write.

Routing: each fact goes to the scope its audience names when the run has it, else to org; a
fact that supersedes or restates a shown record follows that record's scope whatever its tag.
Authorization may then narrow a write (a narrowed correction loses its pointer, so a merge
never crosses a visibility line) or deny it; never widen it. One ``write`` per target scope,
one ``[memory]`` line per reflection with the counters and never a fact's text.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from scopemem.core.policy import RunActor
from scopemem.core.records import Candidate, Kind, Record, WriteCounts
from scopemem.core.reflection import (
    MAX_OUTPUT_TOKENS,
    REFLECTION_SYSTEM,
    SHOWN_PER_SCOPE,
    Reflected,
    ReflectionRejected,
    Turn,
    build_reflection_input,
    parse_reflection,
    should_reflect,
)
from scopemem.core.requests import Request, resolved
from scopemem.core.scopes import scope_kind
from scopemem.plugins import host

if TYPE_CHECKING:
    from scopemem.memory import Memory

log = logging.getLogger("scopemem")


@attrs.frozen(kw_only=True)
class Run:
    """A finished run, as reflection needs it. ``history`` is the thread before this request
    (``Turn``s, ``{"role", "content"}`` dicts or ``(role, content)`` pairs); ``model`` is the
    run's own ``<provider>/<model>`` ref, used when ``memory.model`` is not set."""

    request: Request
    answer: str
    history: Sequence[Turn | Mapping[str, Any] | tuple[str, Any]] = ()
    tool_calls: int = 0
    agent_name: str | None = None
    thread_key: str = ""
    run_id: str | None = None
    model: str | None = None


@attrs.define
class ReflectionReport:
    """What one reflection did: the counters of the ``[memory]`` line."""

    run_id: str | None = None
    offered: int = 0
    dropped: int = 0
    rejected: int = 0
    summary: int = 0
    counts: WriteCounts = attrs.field(factory=WriteCounts)
    narrowed: Counter[str] = attrs.field(factory=Counter)
    denied: Counter[str] = attrs.field(factory=Counter)
    failed_writes: int = 0
    written: dict[str, int] = attrs.field(factory=dict)

    def log_line(self) -> str:
        def reasons(counter: Counter[str]) -> str:
            total = sum(counter.values())
            detail = ", ".join(f"{reason} {n}" for reason, n in sorted(counter.items()))
            return f"{total} ({detail})" if total else "0"

        c = self.counts
        return (
            f"[memory] reflection {self.run_id or '-'}: offered {self.offered}, "
            f"dropped {self.dropped}, rejected {self.rejected}, restated {c.restated}, "
            f"inserted {c.inserted}, deduped {c.deduped}, superseded {c.superseded}, "
            f"evicted {c.evicted}, summary {self.summary}, "
            f"narrowed {reasons(self.narrowed)}, denied {reasons(self.denied)}"
            + (f", failed writes {self.failed_writes}" if self.failed_writes else "")
        )


async def shown_records(memory: Memory, keys: Sequence[str], query: str) -> list[Record]:
    """What the extractor is shown: per scope, up to ``SHOWN_PER_SCOPE`` records the run's
    own request and answer match (retrieval, which bumps them: a record the transcript
    matched was used), plus the repository window as the run saw it (a view: no bump)."""
    shown: dict[str, Record] = {}
    for key in keys:
        if scope_kind(key) == "repo" and memory.config.repo_window > 0:
            for record in await memory.store.list(key, memory.config.repo_window,
                                                  kind=Kind.FACT):
                shown.setdefault(record.id, record)
        for record in await memory.store.retrieve(key, query, SHOWN_PER_SCOPE):
            shown.setdefault(record.id, record)
    return list(shown.values())


def _route(item: Reflected, actor: RunActor, org_key: str, shown: Mapping[str, str]) -> str:
    pointer = item.candidate.supersedes or item.candidate.restates
    if pointer and pointer in shown:
        return shown[pointer]
    return actor.scope(item.audience.value) or org_key


async def reflect(memory: Memory, run: Run) -> ReflectionReport | None:
    """Distill one run. Returns the report, or ``None`` when the run does not qualify or no
    model could be used. Raises on provider or store failure; the scheduler catches."""
    config = memory.config
    if not should_reflect(run.tool_calls, len(run.history), run.agent_name,
                          config.no_reflect_agents):
        return None
    provider, model = memory.reflection_model(run.model)
    if provider is None:
        return None

    repo = await memory.resolve_repo(run.request.repo)
    keys = memory.scope_keys(resolved(run.request, repo))
    actor = RunActor({scope_kind(key): key for key in keys})
    org_key = actor.scope("org")
    if org_key is None:
        log.warning("[memory] reflection skipped: the run has no org scope")
        return None

    shown = await shown_records(memory, keys, f"{run.request.text}\n{run.answer}")
    raw = await provider.complete(
        model=model,
        system=REFLECTION_SYSTEM,
        user=build_reflection_input(shown, run.history, run.request.text, run.answer),
        max_tokens=MAX_OUTPUT_TOKENS,
    )
    report = ReflectionReport(run_id=run.run_id)
    try:
        reflection = parse_reflection(raw, shown_ids={r.id for r in shown},
                                      thread_key=run.thread_key, run_id=run.run_id)
    except ReflectionRejected as exc:
        log.warning("[memory] reflection %s rejected: %s", run.run_id or "-", exc)
        return report
    report.offered = len(reflection.facts)
    report.dropped = reflection.dropped

    items: list[Reflected] = []
    for fact in reflection.facts:
        if host.rejection_markers(memory.pm, fact.candidate):
            report.rejected += 1
        else:
            items.append(fact)
    if reflection.summary is not None:
        items.append(reflection.summary)

    shown_scopes = {record.id: record.scope_key for record in shown}
    batches: dict[str, list[Candidate]] = {}
    for item in items:
        target = _route(item, actor, org_key, shown_scopes)
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

    for key, candidates in batches.items():
        try:
            report.counts += await memory.store.write(key, candidates)
            report.written[key] = len(candidates)
        except Exception as exc:  # one scope's failure must not lose the others' writes
            report.failed_writes += len(candidates)
            log.warning("[memory] reflection write to %s failed: %s", key, exc)
    log.info("%s", report.log_line())
    return report
