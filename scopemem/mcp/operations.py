"""The adapter between the MCP tools and scopemem's operations: the one module of this
surface that calls the typed ``Memory`` API and the read path.

Every operation acts as the configured ``Identity`` and nothing else: the caller is
``user:mcp:<subject>``, the repository and channel are the server's. A scope argument is a
scope *word* (``me``, ``org``, ``repo``, ``channel``, a plugin's kind, ``all``) resolved
against that identity, so no argument can name another person's scope; the API's scope gate
then applies as on the CLI (shared scopes change only for admins).

A refusal or a store failure raises ``Refused`` with the reason a person (or model) reads;
the server turns it into a tool error result.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol

import attrs

from scopemem.api.finished_run import Run
from scopemem.api.memory import Memory
from scopemem.api.results import Caller, MemoryRefused, OperationFailed
from scopemem.chat.commands import (
    UNTRUSTED_CLOSE,
    UNTRUSTED_OPEN,
    CommandContext,
    render_list,
    render_remember,
)
from scopemem.chat.rendering import echoed, fitting, not_shown_note, record_line, within_budget
from scopemem.config import McpSettings
from scopemem.core.commands import ALL, ME, scope_words
from scopemem.core.records import Record
from scopemem.core.reflection import should_reflect
from scopemem.core.requests import Request, ScopeRefused, derive_scope_key
from scopemem.core.text import sanitize_field
from scopemem.mcp import models

#: Reflections a server runs at once; a client asking for more is told to wait, so one
#: session cannot queue model calls without bound.
MAX_PENDING_REFLECTIONS = 8


class HandOffs(Protocol):
    """What runs a server's reflections elsewhere (``mcp.handoff.HandOff``)."""

    def running(self) -> int: ...

    def __call__(self, run: Run) -> None: ...


class Refused(Exception):
    """A tool call that did not do what was asked; ``str()`` is the reason."""


@attrs.frozen
class Identity:
    """Who every call acts for: the configured subject, repository, channel and origin."""

    subject: str
    repo: str | None = None
    channel: str | None = None
    visibility: str = "dm"

    @classmethod
    def from_settings(cls, settings: McpSettings, **overrides: str | None) -> Identity:
        """``[memory.mcp]`` with the command's options (those not ``None``) over it."""
        given = {name: value for name, value in overrides.items() if value is not None}
        return cls(**{**attrs.asdict(settings), **given})

    @property
    def caller(self) -> str:
        return f"user:mcp:{self.subject}"

    @property
    def thread_key(self) -> str:
        return f"mcp:{self.subject}"

    def request(self, text: str = "") -> Request:
        return Request(text=text, user_id=f"mcp:{self.subject}", channel_id=self.channel,
                       repo=self.repo, channel_visibility=self.visibility)

    def api_caller(self) -> Caller:
        return Caller(user_key=self.caller, channel_id=self.channel, repo=self.repo)

    def command_context(self) -> CommandContext:
        # machine=True: record text leaves wrapped as untrusted, whatever the caller's form.
        return CommandContext(caller=self.caller, channel_id=self.channel, repo=self.repo,
                              machine=True)


def record_out(record: Record, match: float | None = None) -> models.RecordOut:
    return models.RecordOut(
        id=sanitize_field(record.id), scope_key=sanitize_field(record.scope_key),
        kind=record.kind.value, text=sanitize_field(record.text),
        created_at=record.created_at, source=record.source.value,
        source_thread_key=sanitize_field(record.source_thread_key),
        confidence=record.confidence, match=match)


def wrapped(lines: Sequence[str]) -> str:
    return "\n".join([UNTRUSTED_OPEN, *lines, UNTRUSTED_CLOSE])


def _refused(exc: MemoryRefused | OperationFailed) -> Refused:
    return Refused(exc.message if isinstance(exc, MemoryRefused) else str(exc))


def _scope_word(memory: Memory, scope: str, *, allow_all: bool) -> str:
    word = scope.strip().lower()
    allowed = [*scope_words(memory.scope_kinds), *([ALL] if allow_all else [])]
    if word not in allowed:
        raise Refused(f"scope takes {'|'.join(allowed)}, got {sanitize_field(scope)!r}; "
                      "your own scope is me, and nobody else's can be named")
    return word


def scope_keys(memory: Memory, identity: Identity, scope: str) -> list[str]:
    """The keys a scope word names for this identity (``all``: every scope it has)."""
    word = _scope_word(memory, scope, allow_all=True)
    request = identity.request()
    if word == ALL:
        keys = memory.scope_keys(request)
    elif word == ME:
        keys = [identity.caller]
    else:
        try:
            keys = [derive_scope_key(memory.scope_kinds, word, request)]
        except ScopeRefused:
            raise Refused(f"this server has no {word} scope"
                          + (" (set repo in [memory.mcp] or pass --repo)"
                             if word == "repo" else "")) from None
    for key in keys:
        refusal = memory.read_refusal(key, identity.api_caller())
        if refusal:
            raise Refused(refusal)
    return keys


# --- the tools' operations -----------------------------------------------------------------


async def context(memory: Memory, identity: Identity, brief: str
                  ) -> tuple[str, models.ContextResult]:
    result = await memory.context(identity.request(brief))
    # The block reaches a model: its use counts are saved before the tool answers.
    await memory.marks_saved()
    if result.scopes and len(result.failed) == len(result.scopes):
        raise Refused("every scope failed: " + "; ".join(
            f"{key}: {reason}" for key, reason in result.failed.items()))
    text = result.block or "nothing matched: a run with this brief gets no block"
    return text, models.ContextResult(block=result.block, scopes=list(result.scopes),
                                      failed=dict(result.failed))


async def search(memory: Memory, identity: Identity, query: str, scope: str, limit: int
                 ) -> tuple[str, models.SearchResult]:
    """Ranked records of the scopes asked for, as the read path ranks keyword hits (match
    and recency); bumps no use count, so looking never reinforces a record."""
    keys = scope_keys(memory, identity, scope)
    word = _scope_word(memory, scope, allow_all=True)
    try:
        result = await memory.search(identity.api_caller(), query, word, limit=limit)
    except (MemoryRefused, OperationFailed) as exc:
        raise _refused(exc) from None
    if result.scopes and len(result.failed) == len(result.scopes):
        raise Refused("every scope failed: " + "; ".join(
            f"{key}: {reason}" for key, reason in result.failed.items()))
    best = list({hit.record.id: hit for hit in result.hits}.values())[:limit]
    shown = best[:fitting([hit.record for hit in best])]
    lines = [record_line(hit.record) for hit in shown]
    text = wrapped(lines) if lines else f"no record matches {echoed(query)!r}"
    if len(shown) < len(best):
        text += "\n" + not_shown_note(len(best) - len(shown))
    return text, models.SearchResult(
        records=[record_out(hit.record, round(hit.match, 4)) for hit in shown],
        scopes=list(result.scopes or keys), failed=dict(result.failed),
        not_shown=len(best) - len(shown), untrusted=True)


async def list_records(memory: Memory, identity: Identity, scope: str, query: str | None,
                       limit: int) -> tuple[str, models.ListResult]:
    word = _scope_word(memory, scope, allow_all=True)
    # A blank query (what a model sends for an optional argument) names no word to keep a
    # record by: it lists them all, as no query does, rather than none.
    query = query if query and query.strip() else None
    try:
        result = await memory.list(identity.api_caller(), word, query=query, limit=limit)
    except (MemoryRefused, OperationFailed) as exc:
        raise _refused(exc) from None
    if not result.ok:
        raise Refused("every scope failed: " + "; ".join(
            f"{section.scope_key}: {section.error}" for section in result.sections))
    # Every scope's records share the answer's budget, the first scopes first.
    kept, not_shown = within_budget(result)
    text = render_list(result, identity.command_context(), budgeted=True).text
    sections = [models.ListedScope(scope_key=section.scope_key,
                                   records=[record_out(record) for record in section.records],
                                   error=section.error)
                for section in kept.sections]
    return text, models.ListResult(scopes=sections, not_shown=not_shown, untrusted=True)


async def remember(memory: Memory, identity: Identity, text: str, scope: str,
                   supersedes: str | None) -> tuple[str, models.RememberResult]:
    """A fact the person states, through ``Memory.remember`` as on the CLI: redacted,
    gated, written as ``human`` to one scope (a shared one only for an admin)."""
    word = _scope_word(memory, scope, allow_all=False)
    try:
        result = await memory.remember(identity.api_caller(), text, word,
                                       supersedes=supersedes.strip() if supersedes else None,
                                       thread_key=f"{identity.thread_key}:remember")
    except (MemoryRefused, OperationFailed) as exc:
        raise _refused(exc) from None
    what: models.RememberOutcome
    if result.outcome == "replaced":
        what = "replaced"
    elif result.outcome == "inserted":
        what = "remembered"
    elif result.outcome == "strengthened":
        what = "already_known"
    else:
        what = "kept"
    counts = result.counts
    return render_remember(result).text, models.RememberResult(
        scope_key=result.scope_key, outcome=what, redacted=result.redacted,
        inserted=counts.inserted, deduped=counts.deduped, restated=counts.restated,
        superseded=counts.superseded)


async def forget(memory: Memory, identity: Identity, record_id: str
                 ) -> tuple[str, models.ForgetResult]:
    # An id copied with the space or line around it is still that id, as a scope word is.
    record_id = record_id.strip()
    try:
        result = await memory.forget(identity.api_caller(), record_id)
    except (MemoryRefused, OperationFailed) as exc:
        raise _refused(exc) from None
    if not result.forgotten:
        raise Refused(f"Nothing to forget: `{sanitize_field(record_id)}` is not an active "
                      "record")
    return (f"🧹 Forgot `{sanitize_field(record_id)}`",
            models.ForgetResult(id=record_id, forgotten=True))


def reflect(memory: Memory, identity: Identity, transcript: Sequence[models.TranscriptTurn],
            tool_calls: int, hand_off: HandOffs | None = None
            ) -> tuple[str, models.ReflectResult]:
    """Hand a finished session to reflection and return at once. The last user turn is the
    request, the agent's turns after it the answer, everything before them the history.
    ``hand_off`` (a stdio server's) runs it in a process of its own, else this one does."""
    turns = [(turn.role, turn.content) for turn in transcript]
    last_user = max((i for i, (role, _) in enumerate(turns) if role == "user"), default=None)
    if last_user is None or last_user == len(turns) - 1:
        raise Refused("a transcript needs a user turn followed by the agent's answer "
                      "(an assistant turn)")
    answer = "\n\n".join(content for _role, content in turns[last_user + 1:])
    history = [{"role": role, "content": content} for role, content in turns[:last_user]]
    run = Run(request=identity.request(turns[last_user][1]), answer=answer, history=history,
              tool_calls=tool_calls, thread_key=identity.thread_key,
              run_id=f"mcp-{uuid.uuid4().hex[:12]}")

    def not_scheduled(reason: str) -> tuple[str, models.ReflectResult]:
        return f"not reflected: {reason}", models.ReflectResult(scheduled=False, reason=reason)

    if not should_reflect(run.tool_calls, len(run.history), None,
                          memory.config.no_reflect_agents):
        return not_scheduled("a session with no tool calls and fewer than four turns before "
                             "its last request teaches nothing durable")
    if run.opted_out:
        return not_scheduled("the session asked to be kept out of memory (<no-memory>)")
    if memory.config.model is None:
        raise Refused("reflection needs memory.model (<provider>/<model>) in the server's "
                      "configuration")
    provider, _model = memory.reflection_model(None)
    if provider is None:
        raise Refused(f"memory.model {memory.config.model!r} cannot be used; the server's "
                      "log says why")
    running = hand_off.running() if hand_off else memory.pending_reflections()
    if running >= MAX_PENDING_REFLECTIONS:
        raise Refused(f"{MAX_PENDING_REFLECTIONS} reflections are still running; try again "
                      "when they are done")
    (hand_off or memory.schedule_reflection)(run)
    return (f"reflection {run.run_id} started; its lessons reach later sessions' context",
            models.ReflectResult(scheduled=True, run_id=run.run_id))
