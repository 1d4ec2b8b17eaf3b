"""Running the human memory commands against a ``Memory``: list, forget, sweep, remember.

Chat adapters call ``Memory.handle_command(text, caller)`` and post the reply; the command
line calls the ``run_*`` functions and prints their outcome as text or JSON. Failures come
back as outcomes (``ok=False``) with a reason, never as exceptions: a person asked, and a
person gets an answer.
"""

from __future__ import annotations

import datetime
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs

from scopemem.core.commands import (
    CommandUsageError,
    ForgetCommand,
    ListCommand,
    ListScope,
    SweepCommand,
    forget_refusal,
    parse_memory_command,
)
from scopemem.core.records import Candidate, Kind, Record, to_wire
from scopemem.core.requests import Request, ScopeRefused, derive_scope_key
from scopemem.core.scopes import MemoryIdError, parse_memory_id, scope_key_problem
from scopemem.core.text import sanitize_field
from scopemem.plugins import host

if TYPE_CHECKING:
    from scopemem.memory import Memory

MACHINE_PLATFORMS = frozenset({"cli", "mcp", "http"})
UNTRUSTED_OPEN, UNTRUSTED_CLOSE = "<untrusted_memory_records>", "</untrusted_memory_records>"

RepoSource = str | Callable[[], "Awaitable[str | None] | str | None"] | None


@attrs.frozen(kw_only=True)
class CommandContext:
    """Who runs a command, and from where. ``caller`` is the person's own user scope key
    (``user:slack:U0123``); ``repo`` may be a zero-argument callable, resolved only when a
    command asks for the repository scope."""

    caller: str
    channel_id: str | None = None
    repo: RepoSource = None
    machine: bool | None = None

    @property
    def is_machine(self) -> bool:
        if self.machine is not None:
            return self.machine
        parts = self.caller.split(":")
        return len(parts) > 1 and parts[1] in MACHINE_PLATFORMS


@attrs.frozen
class Outcome:
    """A command's answer: whether it did what was asked, the reply text, and the same as
    data for ``--json``."""

    ok: bool
    text: str
    data: dict[str, Any] = attrs.field(factory=dict)


def refused(reason: str, **data: Any) -> Outcome:
    return Outcome(False, f"🚫 {reason}", {"ok": False, "error": reason, **data})


def failed(what: str, exc: BaseException) -> Outcome:
    reason = f"{what} failed: {exc}"
    return Outcome(False, f"⚠️ memory store {reason}", {"ok": False, "error": reason})


def caller_problem(caller: str) -> str | None:
    if not isinstance(caller, str) or not caller.startswith("user:"):
        return "the caller must be a user scope key such as user:slack:U0123"
    problem = scope_key_problem(caller)
    return f"the caller {problem}" if problem else None


async def _resolve(repo: RepoSource) -> str | None:
    value: Any = repo() if callable(repo) else repo
    if inspect.isawaitable(value):
        value = await value
    return value if isinstance(value, str) and value else None


async def _scope_key(memory: Memory, scope: ListScope, ctx: CommandContext,
                     repo_option: str | None) -> tuple[str | None, str | None]:
    """The key for a named scope, or a note saying why this request has none."""
    if scope is ListScope.ME:
        return ctx.caller, None
    request = Request()
    if scope is ListScope.REPO:
        repo = repo_option or await _resolve(ctx.repo)
        if repo is None:
            return None, "no repository is bound here; name one with --repo owner/name"
        request = Request(repo=repo)
    elif scope is ListScope.CHANNEL:
        if not ctx.channel_id:
            return None, "this request came from no channel"
        request = Request(channel_id=ctx.channel_id)
    try:
        return derive_scope_key(memory.scope_kinds, scope.value, request), None
    except ScopeRefused as exc:
        return None, str(exc)


def _date(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).strftime("%Y-%m-%d")


def record_line(record: Record) -> str:
    # Sanitized: one line per record whatever the text holds, and nothing that a chat
    # platform or a model could read as markup or a new turn.
    return (f"`{record.id}` {record.kind.value} {_date(record.created_at)} — "
            f"{sanitize_field(record.text)} (source `{sanitize_field(record.source_thread_key)}`)")


def _unavailable(memory: Memory, ctx: CommandContext) -> Outcome | None:
    """Why no command can run at all: memory is off (no store is touched), or the caller is
    not a person's scope."""
    if not memory.enabled:
        return Outcome(False, "memory is off", {"ok": False, "error": "memory is off"})
    problem = caller_problem(ctx.caller)
    return refused(problem) if problem else None


async def _scope_keys(memory: Memory, scope: ListScope, every: list[ListScope],
                      ctx: CommandContext, repo_option: str | None
                      ) -> tuple[list[str], Outcome | None]:
    """The keys a command acts on: one named scope (refused when the request lacks it), or
    for ``all`` each scope of ``every`` the request has."""
    keys: list[str] = []
    for wanted in every if scope is ListScope.ALL else [scope]:
        key, note = await _scope_key(memory, wanted, ctx, repo_option)
        if key is not None:
            keys.append(key)
        elif scope is not ListScope.ALL:
            return [], refused(note or f"no {wanted.value} scope here")
    return keys, None


def _section_title(key: str, ctx: CommandContext) -> str:
    return f"your records ({key})" if key == ctx.caller else key


# --- list ----------------------------------------------------------------------------------------


async def run_list(memory: Memory, command: ListCommand, ctx: CommandContext) -> Outcome:
    unavailable = _unavailable(memory, ctx)
    if unavailable:
        return unavailable
    keys, refusal = await _scope_keys(
        memory, command.scope, [ListScope.ME, ListScope.REPO, ListScope.CHANNEL, ListScope.ORG],
        ctx, command.repo)
    if refusal:
        return refusal
    lines: list[str] = []
    sections: list[dict[str, Any]] = []
    for key in keys:
        try:
            records = await memory.store.list(key, command.limit, query=command.query)
        except Exception as exc:
            return failed(f"list of {key}", exc)
        title = _section_title(key, ctx)
        if command.query is not None:
            title += f", matching {sanitize_field(command.query)!r}"
        lines.append(f"*{title}*")
        if not records:
            lines.append("no active records")
        else:
            body = [record_line(record) for record in records]
            if ctx.is_machine:
                body = [UNTRUSTED_OPEN, *body, UNTRUSTED_CLOSE]
            lines.extend(body)
            if len(records) >= command.limit:
                lines.append(f"(the newest {command.limit}; add words to filter or raise "
                             "--limit, up to 50)")
        sections.append({"scopeKey": key, "records": to_wire(records),
                         "untrusted": ctx.is_machine})
    return Outcome(True, "\n".join(lines), {"ok": True, "scopes": sections})


# --- forget and sweep ----------------------------------------------------------------------------


def _is_admin(memory: Memory, caller: str) -> bool:
    return caller in memory.config.admins


async def run_forget(memory: Memory, command: ForgetCommand, ctx: CommandContext) -> Outcome:
    unavailable = _unavailable(memory, ctx)
    if unavailable:
        return unavailable
    try:
        scope_key, _seq = parse_memory_id(command.record_id)
    except MemoryIdError as exc:
        return refused(f"{sanitize_field(command.record_id)!r} is not a memory id: {exc}")
    reason = forget_refusal(scope_key, ctx.caller, _is_admin(memory, ctx.caller))
    if reason:
        return refused(reason, id=command.record_id)
    try:
        forgotten = await memory.store.forget(scope_key, command.record_id)
    except Exception as exc:
        return failed(f"forget of {command.record_id}", exc)
    data = {"ok": forgotten, "id": command.record_id, "forgotten": forgotten}
    if not forgotten:
        return Outcome(False, f"Nothing to forget: `{command.record_id}` is not an active "
                              "record", data)
    return Outcome(True, f"🧹 Forgot `{command.record_id}`", data)


async def run_sweep(memory: Memory, command: SweepCommand, ctx: CommandContext) -> Outcome:
    unavailable = _unavailable(memory, ctx)
    if unavailable:
        return unavailable
    keys, refusal = await _scope_keys(
        memory, command.scope, [ListScope.ORG, ListScope.REPO, ListScope.CHANNEL], ctx,
        command.repo)
    if refusal:
        return refusal
    for key in keys:
        reason = forget_refusal(key, ctx.caller, _is_admin(memory, ctx.caller))
        if reason:
            return refused(reason)
    lines: list[str] = []
    results: list[dict[str, Any]] = []
    for key in keys:
        try:
            result = await memory.store.sweep(key, dry_run=command.dry_run)
        except Exception as exc:
            return failed(f"sweep of {key}", exc)
        if command.dry_run:
            ids = ", ".join(f"`{i}`" for i in result.ids or ()) or "nothing"
            lines.append(f"🧹 {key}: would sweep {result.swept} ({ids})")
        else:
            lines.append(f"🧹 {key}: swept {result.swept}")
        results.append({"scopeKey": key, **to_wire(result)})
    return Outcome(True, "\n".join(lines), {"ok": True, "dryRun": command.dry_run,
                                            "scopes": results})


# --- remember ------------------------------------------------------------------------------------


async def run_remember(memory: Memory, text: str, scope: ListScope, ctx: CommandContext,
                       repo: str | None = None, thread_key: str = "cli:remember") -> Outcome:
    """Write one human-stated fact through the same gate, scope rules and store write as
    reflection. Shared scopes need an admin, like forget."""
    unavailable = _unavailable(memory, ctx)
    if unavailable:
        return unavailable
    text = text.strip()
    if not text:
        return refused("there is nothing to remember: the text is empty")
    if scope is ListScope.ALL:
        return refused("remember writes to one scope: me, org, repo or channel")
    keys, refusal = await _scope_keys(memory, scope, [], ctx, repo)
    if refusal:
        return refusal
    [key] = keys
    reason = forget_refusal(key, ctx.caller, _is_admin(memory, ctx.caller))
    if reason:
        return refused(reason)
    candidate = Candidate(kind=Kind.FACT, text=text, source_thread_key=thread_key,
                          confidence=1.0)
    markers = host.rejection_markers(memory.pm, candidate)
    if markers:
        return refused(f"that reads as one-moment status, not a lesson ({', '.join(markers)})",
                       markers=markers)
    try:
        counts = await memory.store.write(key, [candidate])
    except Exception as exc:
        return failed(f"write to {key}", exc)
    what = ("remembered" if counts.inserted else
            "already known (strengthened)" if counts.deduped or counts.restated else "kept")
    return Outcome(True, f"🧠 {what} in {key}", {"ok": True, "scopeKey": key,
                                                  **to_wire(counts)})


# --- the chat surface ----------------------------------------------------------------------------


async def handle_command(memory: Memory, text: str, ctx: CommandContext) -> str | None:
    """The reply to a chat message that is a memory command, or ``None`` when it is not one
    (the adapter goes on to the model)."""
    try:
        command = parse_memory_command(text)
    except CommandUsageError as exc:
        return f"🚫 {exc}"
    if command is None:
        return None
    if isinstance(command, ListCommand):
        outcome = await run_list(memory, command, ctx)
    elif isinstance(command, ForgetCommand):
        outcome = await run_forget(memory, command, ctx)
    else:
        outcome = await run_sweep(memory, command, ctx)
    return outcome.text
