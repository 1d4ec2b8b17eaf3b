"""Running the human memory commands against a ``Memory``: list, forget, sweep, remember.

Chat adapters call ``handle_command(memory, text, caller)`` and post the reply; the command
line calls the ``run_*`` functions and prints their outcome as text or JSON. Failures come
back as outcomes (``ok=False``) with a reason, never as exceptions: a person asked, and a
person gets an answer.

Every command passes the same scope gate (``scopemem.core.commands.scope_access``) before it
touches a scope, and a person's ``remember`` takes the same write path as reflection
(``host.screen_candidate``: redaction, the record contract's caps, the status gate).
"""

from __future__ import annotations

import datetime
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from scopemem.core.commands import (
    ALL,
    ME,
    CommandUsageError,
    ForgetCommand,
    ListCommand,
    RememberCommand,
    SweepCommand,
    all_scopes,
    change_refusal,
    parse_memory_command,
    read_refusal,
    shared_scopes,
)
from scopemem.core.records import MAX_TEXT_CHARS, Candidate, Kind, Record, Source, to_wire
from scopemem.core.requests import Request, ScopeRefused, derive_scope_key
from scopemem.core.scopes import MemoryIdError, parse_memory_id, scope_key_problem
from scopemem.core.text import sanitize_field
from scopemem.plugins import host

if TYPE_CHECKING:
    from scopemem.api.memory import Memory

MACHINE_PLATFORMS = frozenset({"cli", "mcp", "http"})
UNTRUSTED_OPEN, UNTRUSTED_CLOSE = "<untrusted_memory_records>", "</untrusted_memory_records>"
REMEMBER_THREAD_KEY = "cli:remember"

RepoSource = str | Callable[[], "Awaitable[str | None] | str | None"] | None


@attrs.frozen(kw_only=True)
class CommandContext:
    """Who runs a command, and from where. ``caller`` is the person's own user scope key
    (``user:slack:U0123``); ``repo`` may be a zero-argument callable, resolved only when a
    command asks for the repository scope; ``extra`` carries the inputs a plugin's scope
    kind is derived from (``{"guild_id": "…"}``), as ``Request.extra`` does for a run."""

    caller: str
    channel_id: str | None = None
    repo: RepoSource = None
    machine: bool | None = None
    extra: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def is_machine(self) -> bool:
        if self.machine is not None:
            return self.machine
        parts = self.caller.split(":")
        return len(parts) > 1 and parts[1] in MACHINE_PLATFORMS


@attrs.frozen
class Outcome:
    """A command's answer: whether it did what was asked, the reply text, the same as data
    for ``--json``, and warnings a terminal prints apart from the text (on stderr)."""

    ok: bool
    text: str
    data: dict[str, Any] = attrs.field(factory=dict)
    warnings: tuple[str, ...] = ()


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


async def _scope_key(memory: Memory, scope: str, ctx: CommandContext,
                     repo_option: str | None) -> tuple[str | None, str | None]:
    """The key for a named scope, or a note saying why this request has none."""
    if scope == ME:
        return ctx.caller, None
    repo = None
    if scope == "repo":
        repo = repo_option or await _resolve(ctx.repo)
        if repo is None:
            return None, "no repository is bound here; name one with --repo owner/name"
    elif scope == "channel" and not ctx.channel_id:
        return None, "this request came from no channel"
    request = Request(channel_id=ctx.channel_id, repo=repo, extra=dict(ctx.extra))
    try:
        return derive_scope_key(memory.scope_kinds, scope, request), None
    except ScopeRefused as exc:
        return None, str(exc)


def _date(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).strftime("%Y-%m-%d")


def record_line(record: Record) -> str:
    # Sanitized: one line per record whatever the text holds, and nothing that a chat
    # platform or a model could read as markup or a new turn, under any Unicode
    # normalisation, nor any character a person reading the reply cannot see. The id is a
    # store's, but it is rendered from the record all the same.
    return (f"`{sanitize_field(record.id)}` {record.kind.value} {_date(record.created_at)} — "
            f"{sanitize_field(record.text)} (source `{sanitize_field(record.source_thread_key)}`)")


def _unavailable(memory: Memory, ctx: CommandContext) -> Outcome | None:
    """Why no command can run at all: memory is off (no store is touched), or the caller is
    not a person's scope."""
    if not memory.enabled:
        return Outcome(False, "memory is off", {"ok": False, "error": "memory is off"})
    problem = caller_problem(ctx.caller)
    return refused(problem) if problem else None


async def _scope_keys(memory: Memory, scope: str, every: list[str], ctx: CommandContext,
                      repo_option: str | None) -> tuple[list[str], Outcome | None]:
    """The keys a command acts on: one named scope (refused when the request lacks it), or
    for ``all`` each scope of ``every`` the request has."""
    if scope != ALL and scope != ME and scope not in memory.scope_kinds:
        return [], refused(f"no scope kind {scope!r} is registered here; known: "
                           f"{', '.join(sorted(memory.scope_kinds))}")
    keys: list[str] = []
    for wanted in every if scope == ALL else [scope]:
        key, note = await _scope_key(memory, wanted, ctx, repo_option)
        if key is not None:
            keys.append(key)
        elif scope != ALL:
            return [], refused(note or f"no {wanted} scope here")
    return keys, None


def _section_title(key: str, ctx: CommandContext) -> str:
    # A key may hold what a person typed (``--repo``): rendered like the block's prefix.
    return f"your records ({sanitize_field(key)})" if key == ctx.caller else sanitize_field(key)


def _change_refusal(memory: Memory, key: str, ctx: CommandContext) -> str | None:
    return change_refusal(key, ctx.caller, ctx.caller in memory.config.admins, memory.org_key,
                          memory.scope_kinds)


# --- list ----------------------------------------------------------------------------------------


async def run_list(memory: Memory, command: ListCommand, ctx: CommandContext) -> Outcome:
    """List each scope asked for. A scope whose store fails says so in its section (a
    silent "no active records" would be a lie); the outcome fails only when every scope
    did."""
    unavailable = _unavailable(memory, ctx)
    if unavailable:
        return unavailable
    keys, refusal = await _scope_keys(memory, command.scope, all_scopes(memory.scope_kinds),
                                      ctx, command.repo)
    if refusal:
        return refusal
    for key in keys:
        reason = read_refusal(key, ctx.caller, memory.org_key, memory.scope_kinds)
        if reason:
            return refused(reason)
    lines: list[str] = []
    sections: list[dict[str, Any]] = []
    failures = 0
    for key in keys:
        title = _section_title(key, ctx)
        if command.query is not None:
            title += f", matching {sanitize_field(command.query)!r}"
        lines.append(f"*{title}*")
        try:
            records = await memory.store.list(key, command.limit, query=command.query)
        except Exception as exc:
            failures += 1
            reason = f"list of {key} failed: {exc}"
            lines.append(f"⚠️ memory store {reason}")
            sections.append({"scopeKey": key, "error": reason})
            continue
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
    ok = not keys or failures < len(keys)
    data: dict[str, Any] = {"ok": ok, "scopes": sections}
    if not ok:
        data["error"] = "every scope failed"
    return Outcome(ok, "\n".join(lines), data)


# --- forget and sweep ----------------------------------------------------------------------------


async def run_forget(memory: Memory, command: ForgetCommand, ctx: CommandContext) -> Outcome:
    unavailable = _unavailable(memory, ctx)
    if unavailable:
        return unavailable
    try:
        scope_key, _seq = parse_memory_id(command.record_id)
    except MemoryIdError as exc:
        return refused(f"{sanitize_field(command.record_id)!r} is not a memory id: {exc}")
    reason = _change_refusal(memory, scope_key, ctx)
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
    keys, refusal = await _scope_keys(memory, command.scope, shared_scopes(memory.scope_kinds),
                                      ctx, command.repo)
    if refusal:
        return refusal
    for key in keys:
        reason = _change_refusal(memory, key, ctx)
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


async def run_remember(memory: Memory, command: RememberCommand, ctx: CommandContext,
                       thread_key: str = REMEMBER_THREAD_KEY) -> Outcome:
    """Write one fact a person states, through the same write path as reflection (redaction,
    the record contract's caps, the status gate) and the same scope gate as forget: a shared
    scope needs an admin. The fact is stored as ``human``: no reflection can retire it. With
    ``supersedes`` it replaces a record of the same scope, whoever stated it."""
    unavailable = _unavailable(memory, ctx)
    if unavailable:
        return unavailable
    text = command.text.strip()
    if not text:
        return refused("there is nothing to remember: the text is empty")
    if command.scope == ALL:
        return refused("remember writes to one scope: me, or one shared scope")
    keys, refusal = await _scope_keys(memory, command.scope, [], ctx, command.repo)
    if refusal:
        return refusal
    [key] = keys
    reason = _change_refusal(memory, key, ctx)
    if reason:
        return refused(reason)
    if command.supersedes is not None:
        try:
            target_scope, _seq = parse_memory_id(command.supersedes)
        except MemoryIdError as exc:
            return refused(f"--supersedes {sanitize_field(command.supersedes)!r} is not a "
                           f"memory id: {exc}")
        if target_scope != key:
            return refused(f"--supersedes names a record of {target_scope}, not of {key}; "
                           "a fact can only replace one of its own scope")
    candidate = Candidate(kind=Kind.FACT, text=text, source_thread_key=thread_key,
                          confidence=1.0, source=Source.HUMAN, supersedes=command.supersedes)
    screened = host.screen_candidate(memory.pm, memory.config, candidate)
    if screened.cut:
        return refused(f"that text is {len(text)} characters; a record holds at most "
                       f"{MAX_TEXT_CHARS}: shorten it or split it into several facts")
    if screened.rejected:
        return refused(f"not remembered: {host.describe_markers(screened.markers)}",
                       markers=list(screened.markers))
    try:
        counts = await memory.store.write(key, [screened.candidate])
    except Exception as exc:
        return failed(f"write to {key}", exc)
    if counts.superseded:
        what = f"remembered, replacing `{command.supersedes}`,"
    elif counts.inserted:
        what = "remembered"
    elif counts.deduped or counts.restated:
        what = "already known (strengthened)"
    else:
        what = "kept"
    notes = []
    if command.supersedes and counts.inserted and not counts.superseded:
        notes.append(f"`{command.supersedes}` was not an active record; nothing replaced")
    if screened.redacted:
        notes.append("a secret in it was redacted")
    note = f" ({'; '.join(notes)})" if notes else ""
    return Outcome(True, f"🧠 {what} in {key}{note}",
                   {"ok": True, "scopeKey": key, "redacted": screened.redacted,
                    **to_wire(counts)})


# --- the chat surface ----------------------------------------------------------------------------


async def handle_command(
    memory: Memory,
    text: str,
    caller: str,
    *,
    channel_id: str | None = None,
    repo: RepoSource = None,
    machine: bool | None = None,
    extra: Mapping[str, str] | None = None,
) -> str | None:
    """The reply to a chat message that is a ``memory list|forget|sweep|remember`` command,
    or ``None`` when the message is not one (the adapter goes on to the model). Never
    raises for a user's mistake or a store failure: those are reply lines (🚫, ⚠️).
    ``caller`` is the person's own user scope key; ``repo`` may be a callable, resolved only
    if the repository scope is asked for; ``machine`` marks a surface whose record text
    must be wrapped as untrusted (default: callers on the cli, mcp and http platforms);
    ``extra`` carries what a plugin's scope kind is derived from (as ``Request.extra``)."""
    context = CommandContext(caller=caller, channel_id=channel_id, repo=repo,
                             machine=machine, extra=dict(extra or {}))
    return await reply(memory, text, context)


async def reply(memory: Memory, text: str, ctx: CommandContext) -> str | None:
    """``handle_command`` for a ``CommandContext`` already built."""
    try:
        command = parse_memory_command(text, memory.scope_kinds)
    except CommandUsageError as exc:
        return f"🚫 {exc}"
    if command is None:
        return None
    if isinstance(command, ListCommand):
        outcome = await run_list(memory, command, ctx)
    elif isinstance(command, ForgetCommand):
        outcome = await run_forget(memory, command, ctx)
    elif isinstance(command, RememberCommand):
        outcome = await run_remember(memory, command, ctx,
                                     thread_key=_chat_thread_key(ctx))
    else:
        outcome = await run_sweep(memory, command, ctx)
    return outcome.text


def _chat_thread_key(ctx: CommandContext) -> str:
    """The provenance of a fact stated in chat: the channel it was said in."""
    return f"{ctx.channel_id}:remember" if ctx.channel_id else "chat:remember"
