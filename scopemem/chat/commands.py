"""The chat surface of the manual operations: ``memory list|forget|sweep|remember``.

Chat adapters call ``handle_command(memory, text, caller)`` and post the reply; the command
line calls the ``run_*`` functions and prints their outcome as text or JSON. Both are a thin
layer over the typed operations on ``Memory`` (``scopemem.api.operations``), which own the
scope gate and the write path: this module parses (``scopemem.core.commands``) and renders.
Refusals and failures come back as outcomes (``ok=False``) with a reason, never as
exceptions: a person asked, and a person gets an answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from scopemem.api.operations import REMEMBER_THREAD_KEY
from scopemem.api.results import (
    Caller,
    ListResult,
    MemoryRefused,
    OperationFailed,
    RememberResult,
    RepoSource,
)
from scopemem.chat.rendering import (
    MAX_REPLY_TEXT_CHARS,
    code,
    echoed,
    not_shown_note,
    record_line,
    within_budget,
)
from scopemem.core.commands import (
    CommandUsageError,
    ForgetCommand,
    ListCommand,
    RememberCommand,
    SweepCommand,
    parse_memory_command,
)
from scopemem.core.records import to_wire
from scopemem.core.text import sanitize_field
from scopemem.errors import PluginError

if TYPE_CHECKING:
    from scopemem.api.memory import Memory

MACHINE_PLATFORMS = frozenset({"cli", "mcp", "http"})
UNTRUSTED_OPEN, UNTRUSTED_CLOSE = "<untrusted_memory_records>", "</untrusted_memory_records>"


@attrs.frozen(kw_only=True)
class CommandContext:
    """Who runs a command, and from where. ``caller`` is the person's own user scope key
    (``user:slack:U0123``); ``repo`` may be a zero-argument callable, resolved only when a
    command asks for the repository scope; ``extra`` carries the inputs a plugin's scope
    kind is derived from (``{"guild_id": "…"}``), as ``Request.extra`` does for a run;
    ``channel_visibility`` is the channel's, as a run's (``dm``: its scope is the caller's);
    ``markdown`` False (a terminal) renders ids and headings plain, not as chat markup."""

    caller: str
    channel_id: str | None = None
    repo: RepoSource = None
    machine: bool | None = None
    extra: Mapping[str, str] = attrs.field(factory=dict)
    channel_visibility: str | None = None
    markdown: bool = True

    @property
    def is_machine(self) -> bool:
        if self.machine is not None:
            return self.machine
        parts = self.caller.split(":")
        return len(parts) > 1 and parts[1] in MACHINE_PLATFORMS

    def identity(self, repo: str | None = None) -> Caller:
        """The caller the API is given: this context, with ``repo`` (a command's
        ``--repo``) standing in for the bound repository when given."""
        return Caller(user_key=self.caller, channel_id=self.channel_id,
                      repo=repo or self.repo, extra=self.extra,
                      channel_visibility=self.channel_visibility)


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


def refusal(exc: MemoryRefused) -> Outcome:
    """A refusal as a reply: memory off is said plainly, anything else after 🚫."""
    if exc.reason == "memory_off":
        return Outcome(False, exc.message, {"ok": False, "error": exc.message})
    return refused(exc.message, **exc.details)


def _section_title(key: str, ctx: CommandContext) -> str:
    # A key may hold what a person typed (``--repo``): rendered like the block's prefix.
    return f"your records ({sanitize_field(key)})" if key == ctx.caller else sanitize_field(key)


def _answered(run: Callable[[], Awaitable[Outcome]]) -> Callable[[], Awaitable[Outcome]]:
    """``run``'s outcome, with the API's refusals and store failures as reply outcomes."""

    async def answer() -> Outcome:
        try:
            return await run()
        except MemoryRefused as exc:
            return refusal(exc)
        except OperationFailed as exc:  # "⚠️ memory store forget of <id> failed: <cause>"
            return Outcome(False, f"⚠️ memory store {exc}", {"ok": False, "error": str(exc)})
        except PluginError as exc:  # "⚠️ plugin 'x' failed in scopemem_…: <cause>"
            return Outcome(False, f"⚠️ {exc}", {"ok": False, "error": str(exc)})

    return answer


# --- list ----------------------------------------------------------------------------------------


async def run_list(memory: Memory, command: ListCommand, ctx: CommandContext, *,
                   budgeted: bool = False) -> Outcome:
    """List each scope asked for. A scope whose store fails says so in its section (a
    silent "no active records" would be a lie); the outcome fails only when every scope
    did. ``budgeted``: as ``render_list`` takes it."""

    async def run() -> Outcome:
        result = await memory.list(ctx.identity(command.repo), command.scope,
                                   query=command.query, limit=command.limit)
        return render_list(result, ctx, budgeted=budgeted)

    return await _answered(run)()


def render_list(result: ListResult, ctx: CommandContext, *, budgeted: bool = False
                ) -> Outcome:
    """The listing as a reply; ``budgeted`` (a chat's, an agent's) holds at most
    ``MAX_REPLY_TEXT_CHARS`` of record text and says how many records it left out."""
    result, left = within_budget(result) if budgeted else (result, 0)
    lines: list[str] = []
    sections: list[dict[str, Any]] = []
    for section in result.sections:
        key = section.scope_key
        title = _section_title(key, ctx)
        if result.query is not None:
            title += f", matching {echoed(result.query)!r}"
        lines.append(f"*{title}*" if ctx.markdown else title)
        if section.error is not None:
            lines.append(f"⚠️ memory store {section.error}")
            sections.append({"scopeKey": key, "error": section.error})
            continue
        records = list(section.records)
        if not records:
            lines.append("no active records")
        else:
            body = [record_line(record, ctx.markdown) for record in records]
            if ctx.is_machine:
                body = [UNTRUSTED_OPEN, *body, UNTRUSTED_CLOSE]
            lines.extend(body)
            if len(records) >= result.limit:
                lines.append(f"(the newest {result.limit}; add words to filter or raise "
                             "the limit, up to 50)")
        sections.append({"scopeKey": key, "records": to_wire(records),
                         "untrusted": ctx.is_machine})
    if left:
        lines.append(not_shown_note(left))
    data: dict[str, Any] = {"ok": result.ok, "scopes": sections, "notShown": left}
    if not result.ok:
        data["error"] = "every scope failed"
    return Outcome(result.ok, "\n".join(lines), data)


# --- forget and sweep ----------------------------------------------------------------------------


async def run_forget(memory: Memory, command: ForgetCommand, ctx: CommandContext) -> Outcome:
    async def run() -> Outcome:
        result = await memory.forget(ctx.identity(), command.record_id)
        data = {"ok": result.forgotten, "id": result.record_id, "forgotten": result.forgotten}
        if not result.forgotten:
            return Outcome(False, f"Nothing to forget: {code(result.record_id, ctx.markdown)}"
                                  " is not an active record", data)
        return Outcome(True, f"🧹 Forgot {code(result.record_id, ctx.markdown)}", data)

    return await _answered(run)()


async def run_sweep(memory: Memory, command: SweepCommand, ctx: CommandContext, *,
                    budgeted: bool = False) -> Outcome:
    """Sweep (or dry-run) each scope asked for. ``budgeted`` (a chat's reply): a dry run
    lists ids within ``MAX_REPLY_TEXT_CHARS`` in all, and says how many it left out; the
    counts are always whole."""

    async def run() -> Outcome:
        report = await memory.sweep(ctx.identity(command.repo), command.scope,
                                    dry_run=command.dry_run)
        lines: list[str] = []
        budget, left = MAX_REPLY_TEXT_CHARS, 0
        for scope in report.scopes:
            # A key may hold what a person typed (``--repo``): rendered as a record's text.
            key, result = sanitize_field(scope.scope_key), scope.result
            if report.dry_run:
                shown = [code(i, ctx.markdown) for i in result.ids or ()]
                if budgeted:
                    fits = 0
                    while fits < len(shown) and len(shown[fits]) + 2 <= budget:
                        budget -= len(shown[fits]) + 2
                        fits += 1
                    left += len(shown) - fits
                    shown = shown[:fits]
                ids = ", ".join(shown) or "nothing"
                lines.append(f"🧹 {key}: would sweep {result.swept} ({ids})")
            else:
                lines.append(f"🧹 {key}: swept {result.swept}")
        if left:
            lines.append(f"({left} more not listed: a reply holds at most "
                         f"{MAX_REPLY_TEXT_CHARS:,} characters)")
        results = [{"scopeKey": scope.scope_key, **to_wire(scope.result)}
                   for scope in report.scopes]
        return Outcome(True, "\n".join(lines), {"ok": True, "dryRun": report.dry_run,
                                                "scopes": results})

    return await _answered(run)()


# --- remember ------------------------------------------------------------------------------------


_REMEMBERED = {"replaced": "remembered, replacing {},", "inserted": "remembered",
               "strengthened": "already known (strengthened)", "kept": "kept"}


async def run_remember(memory: Memory, command: RememberCommand, ctx: CommandContext,
                       thread_key: str = REMEMBER_THREAD_KEY) -> Outcome:
    """Write one fact a person states (``Memory.remember``: the write path reflection
    takes, and a shared scope needs an admin)."""

    async def run() -> Outcome:
        return render_remember(await memory.remember(
            ctx.identity(command.repo), command.text, command.scope,
            supersedes=command.supersedes, thread_key=thread_key), ctx.markdown)

    return await _answered(run)()


def render_remember(result: RememberResult, markdown: bool = True) -> Outcome:
    # The key and the id may hold what a person typed (``--repo``, ``--supersedes``).
    supersedes = code(result.supersedes or "", markdown)
    what = _REMEMBERED[result.outcome].format(supersedes)
    notes = []
    if result.replaced_nothing:
        notes.append(f"{supersedes} was not an active record; nothing replaced")
    if result.redacted:
        notes.append("a secret in it was redacted")
    if not result.durable:
        notes.append("kept in this process only: lost when this bot restarts")
    note = f" ({'; '.join(notes)})" if notes else ""
    return Outcome(True, f"🧠 {what} in {sanitize_field(result.scope_key)}{note}",
                   {"ok": True, "scopeKey": result.scope_key, "redacted": result.redacted,
                    **to_wire(result.counts)})


# --- the chat surface ----------------------------------------------------------------------------


async def handle_command(
    memory: Memory,
    text: str | None,
    caller: str | Caller,
    *,
    channel_id: str | None = None,
    repo: RepoSource = None,
    machine: bool | None = None,
    extra: Mapping[str, str] | None = None,
    channel_visibility: str | None = None,
) -> str | None:
    """The reply to a chat message that is a ``memory list|forget|sweep|remember`` command,
    or ``None`` when the message is not one (the adapter goes on to the model). Never
    raises for a user's mistake or a store failure: those are reply lines (🚫, ⚠️).
    ``caller`` is the person's own user scope key, or a ``Caller`` (its channel, repo and
    extra stand in for the arguments not given); ``repo`` may be a callable, resolved only
    if the repository scope is asked for; ``machine`` marks a surface whose record text
    must be wrapped as untrusted (default: callers on the cli, mcp and http platforms);
    ``extra`` carries what a plugin's scope kind is derived from (as ``Request.extra``);
    ``channel_visibility`` is the channel's, as a run's ``Request`` stamps it (in a ``dm``
    the channel's scope is the caller's own). A message with no text (``None``: a file
    shared, an edit) is no command."""
    if not isinstance(text, str):
        return None
    if isinstance(caller, Caller):
        channel_id = caller.channel_id if channel_id is None else channel_id
        repo = caller.repo if repo is None else repo
        extra = caller.extra if extra is None else extra
        if channel_visibility is None:
            channel_visibility = caller.channel_visibility
        caller = caller.user_key
    context = CommandContext(caller=caller, channel_id=channel_id, repo=repo,
                             machine=machine, extra=dict(extra or {}),
                             channel_visibility=channel_visibility)
    return await reply(memory, text, context)


async def reply(memory: Memory, text: str, ctx: CommandContext) -> str | None:
    """``handle_command`` for a ``CommandContext`` already built."""
    try:
        command = parse_memory_command(text, memory.scope_kinds)
    except CommandUsageError as exc:
        return _usage_reply(exc)
    if command is None:
        return None
    typed = getattr(command, "repo", None)
    if typed is not None:
        from scopemem.gitremote import typed_repo

        # As the command line checks its --repo: a URL or a bare name would make a scope
        # no run reads (and keep a remembered fact where nobody would find it).
        ok, named = typed_repo(typed)
        if not ok:
            hint = f": --repo {named}" if named else " (e.g. acme/api)"
            verb = {ListCommand: "list", SweepCommand: "sweep"}.get(type(command), "remember")
            problem = f"--repo takes OWNER/NAME as a clone's remote names it{hint}"
            return _usage_reply(CommandUsageError(problem, verb))
    if isinstance(command, ListCommand):
        outcome = await run_list(memory, command, ctx, budgeted=True)
    elif isinstance(command, ForgetCommand):
        outcome = await run_forget(memory, command, ctx)
    elif isinstance(command, RememberCommand):
        outcome = await run_remember(memory, command, ctx,
                                     thread_key=_chat_thread_key(ctx))
    else:
        outcome = await run_sweep(memory, command, ctx, budgeted=True)
    return outcome.text


def _usage_reply(exc: CommandUsageError) -> str:
    """A usage error as a reply. The problem may quote what was typed: it is rendered as a
    record's text is, so a reply never carries markup (``<!channel>``) a person typed."""
    return f"🚫 {sanitize_field(exc.problem)}. Usage: {exc.usage}"


def _chat_thread_key(ctx: CommandContext) -> str:
    """The provenance of a fact stated in chat: the channel it was said in."""
    return f"{ctx.channel_id}:remember" if ctx.channel_id else "chat:remember"
