"""The human memory commands on the command line: list, forget, sweep, remember, context.

They share the chat grammar's rules (``scopemem.core.commands``) and its executor
(``scopemem.chat.commands``), act as the local person ``user:cli:local`` in no channel, and run
against the configured store (an SQLite directory or a worker URL). Acting for someone else
(``--as`` another user scope, ``--channel``; for ``context``, ``--user`` another person) is
the operator's and takes ``--operator`` (``cli.root.need_operator``). Human output by
default, ``--json`` for scripts; a refusal or failure exits 1, a usage error 2.

A command lives for a moment, so it never runs on a store that dies with it: the worker
client without its token is a configuration error naming the variable (a bot would fall back
to the in-process store), and a command that changes records refuses a store that keeps them
in this process only.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import click

from scopemem.cli.root import CliState, echo_json, need_operator, operator_option
from scopemem.core.commands import (
    ALL,
    DEFAULT_LIST_LIMIT,
    MAX_LIST_LIMIT,
    ME,
    ForgetCommand,
    ListCommand,
    RememberCommand,
    SweepCommand,
    scope_words,
)
from scopemem.errors import ScopememError
from scopemem.plugins.markers import hookimpl

if TYPE_CHECKING:
    from scopemem.api.memory import Memory
    from scopemem.chat.commands import Outcome

DEFAULT_CALLER = "user:cli:local"


def _caller(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    from scopemem.api.results import caller_problem

    problem = caller_problem(value)
    if problem:
        raise click.BadParameter(problem)
    return value


def _extra(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
           ) -> dict[str, str]:
    extra: dict[str, str] = {}
    for value in values:
        name, sep, given = value.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {value!r}")
        extra[name.strip()] = given
    return extra


def _platform_id(kind: str, example: str) -> Callable[[click.Context, click.Parameter,
                                                      str | None], str | None]:
    """A click callback for a platform id (``--user slack:U0123``, ``--channel
    slack:C0456``): checked as the scope key it makes (``<kind>:<id>``), so a mistake is a
    usage error rather than a scope nobody has. A scope key given for the id
    (``user:slack:U0123``) would make ``user:user:slack:U0123``: a usage error too."""

    def check(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        from scopemem.core.scopes import scope_key_problem

        if value is None:
            return None
        if not value.strip():
            raise click.BadParameter("must not be empty")
        if value.startswith(f"{kind}:"):
            raise click.BadParameter(
                f"takes the platform id (e.g. {example}), not the {kind} scope's key:"
                f" {param.opts[0]} {value[len(kind) + 1:]}")
        problem = scope_key_problem(f"{kind}:{value}")
        if problem:
            raise click.BadParameter(problem)
        return value

    return check


def _repo(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """``--repo`` as a run's repository scope names it: ``owner/name`` (or
    ``group/sub/name``), as ``gitremote.repo_from_url`` reads it off a clone's remote. A URL,
    a ``.git`` suffix or a bare name would make a scope no run reads: a usage error, naming
    the ``owner/name`` when there is one."""
    from scopemem.gitremote import typed_repo

    if value is None:
        return None
    ok, named = typed_repo(value)
    if not ok:
        hint = f": --repo {named}" if named else " (e.g. acme/api)"
        raise click.BadParameter(f"takes OWNER/NAME as a clone's remote names it{hint}")
    return value


def _acting(caller: str, channel: str | None, operator: bool) -> None:
    """``--as`` another person and ``--channel`` act beyond the local person: a usage error
    without ``--operator``."""
    if caller != DEFAULT_CALLER:
        need_operator(operator, f"--as {caller} acts for another person than "
                                f"{DEFAULT_CALLER}")
    if channel is not None:
        need_operator(operator, f"--channel {channel} acts from a channel, whose scope only "
                                "its members reach")


def _forgettable_here(record_id: str, caller: str, channel: str | None) -> None:
    """An error naming the flags that reach ``record_id`` when it is in a person's or a
    channel's scope the command does not act as or from: the gate's own reason, the chat's,
    says nobody else can reach it, which the operator at the command line can."""
    from scopemem.core.policy import Audience, audience_of
    from scopemem.core.scopes import MemoryIdError, parse_memory_id

    try:
        scope_key, _seq = parse_memory_id(record_id)
    except MemoryIdError:
        return  # the forget itself says what an id looks like
    audience, rest = audience_of(scope_key), scope_key.partition(":")[2]
    if audience is Audience.PERSON and scope_key != caller:
        raise click.ClickException(
            f"{record_id} is in another person's scope ({scope_key}): forget it as that "
            f"person, with --operator --as {scope_key}")
    if audience is Audience.ORIGIN and rest != channel:
        raise click.ClickException(
            f"{record_id} is in another channel's scope ({scope_key}): forget it from "
            f"that channel, with --operator --channel {rest}")


def _memory(state: CliState) -> Memory:
    """The configured memory for one command. Never the in-process stand-in a bot may fall
    back to: it would die with the command, and everything the command wrote with it."""
    from scopemem.api.memory import Memory

    try:
        return Memory.from_config(state.config(), plugin_manager=state.pm,
                                  allow_fallback=False)
    except ScopememError as exc:
        raise click.ClickException(str(exc)) from None


def _scope(memory: Memory, value: str | None, allowed: list[str]) -> str | None:
    """``--scope`` checked against the scope words this installation has (a plugin's kinds
    included); a usage error naming them otherwise."""
    if value is None or value.lower() in allowed:
        return None if value is None else value.lower()
    import asyncio

    asyncio.run(memory.close())
    raise click.BadParameter(f"takes {'|'.join(allowed)}, got {value!r}"
                             f"{_key_hint(value, allowed)}", param_hint="'--scope'")


def _key_hint(value: str, allowed: list[str]) -> str:
    """For a scope's key given as ``--scope`` (as ``export`` takes it), the word and flags
    that name that scope here; empty for anything else."""
    from scopemem.core.scopes import identifier_problem

    if identifier_problem(value, max_chars=len(value)) is not None:
        return ""  # not a key: nothing of it is echoed back
    kind, _, rest = value.partition(":")
    flags = {"repo": f"--scope repo --repo {rest}",
             "channel": f"--scope channel --channel {rest} --operator",
             "user": f"--scope me --as {value} --operator"}.get(kind, f"--scope {kind}")
    word = flags.split()[1]
    if not rest or word not in allowed:
        return ""
    return f" (a scope's key: name that scope with {flags})"


def _durable(memory: Memory) -> None:
    """A command that changes records refuses a store that keeps them in this process only:
    its change would be gone when the command exits, though it said it was done."""
    if memory.enabled and not memory.store_is_durable:
        import asyncio

        asyncio.run(memory.close())
        where = ("keeps no records" if memory.config.store == "null"
                 else "keeps records in this process only")
        raise click.ClickException(
            f"memory.store = {memory.config.store!r} {where}; a one-shot command's change"
            " would be lost when it exits (use a store that keeps them: sqlite, worker)")


def _run(memory: Memory, action: Callable[[Any], Awaitable[Outcome]], as_json: bool) -> None:
    import asyncio

    async def main() -> Outcome:
        try:
            return await action(memory)
        finally:
            await memory.close()

    outcome = asyncio.run(main())
    if as_json:
        echo_json(outcome.data)
    else:
        for warning in outcome.warnings:
            click.echo(warning, err=True)
        click.echo(outcome.text, err=not outcome.ok)
    if not outcome.ok:
        sys.exit(1)


as_option = click.option("--as", "caller", default=DEFAULT_CALLER, show_default=True,
                         callback=_caller,
                         help="Act as this user scope (user:<platform>:<id>); another "
                              "person's takes --operator.")
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
repo_option = click.option("--repo", metavar="OWNER/NAME", callback=_repo,
                           help="The repository scope to use.")
channel_option = click.option("--channel", metavar="ID",
                              callback=_platform_id("channel", "slack:C0456"),
                              help="The channel id (platform-namespaced, e.g. slack:C0456); "
                                   "takes --operator.")
extra_option = click.option("--extra", "extra", multiple=True, metavar="KEY=VALUE",
                            callback=_extra,
                            help="An input a plugin's scope kind is derived from "
                                 "(e.g. guild_id=123); repeatable.")


@hookimpl
def scopemem_register_commands(cli: click.Group) -> None:
    @cli.command(name="list")
    @click.argument("words", nargs=-1)
    @click.option("--scope", metavar="me|org|repo|channel|<kind>|all",
                  help="Which scope to list (default all; a leading scope word works too).")
    @click.option("--limit", type=click.IntRange(1, MAX_LIST_LIMIT), default=DEFAULT_LIST_LIMIT,
                  show_default=True, help="Records per scope.")
    @repo_option
    @channel_option
    @extra_option
    @as_option
    @operator_option
    @json_option
    @click.pass_obj
    def list_command(state: CliState, words: tuple[str, ...], scope: str | None, limit: int,
                     repo: str | None, channel: str | None, extra: dict[str, str],
                     caller: str, operator: bool, as_json: bool) -> None:
        """List active records, newest first; WORDS filter by whole words.

        As in chat, a leading scope word (``scopemem list org deploy``) names the scope when
        --scope is not given. A scope that fails says so; the exit is 1 when every scope
        failed."""
        _acting(caller, channel, operator)
        from scopemem.chat.commands import CommandContext, run_list

        memory = _memory(state)
        allowed = [*scope_words(memory.scope_kinds), ALL]
        rest = list(words)
        scope = _scope(memory, scope, allowed)
        if scope is None:
            scope = rest.pop(0).lower() if rest and rest[0].lower() in allowed else ALL
        command = ListCommand(scope=scope, limit=limit,
                              query=" ".join(rest) if rest else None, repo=repo)
        context = CommandContext(caller=caller, channel_id=channel, extra=extra, machine=True,
                                 markdown=False)
        _run(memory, lambda memory: run_list(memory, command, context), as_json)

    @cli.command(name="forget")
    @click.argument("record_id", metavar="ID")
    @channel_option
    @as_option
    @operator_option
    @json_option
    @click.pass_obj
    def forget_command(state: CliState, record_id: str, channel: str | None, caller: str,
                       operator: bool, as_json: bool) -> None:
        """Forget one record (mem:<scope>:<n>); it stays stored, invisible to every read."""
        _acting(caller, channel, operator)
        _forgettable_here(record_id, caller, channel)
        from scopemem.chat.commands import CommandContext, run_forget

        memory = _memory(state)
        _durable(memory)
        context = CommandContext(caller=caller, channel_id=channel, machine=True,
                                 markdown=False)
        _run(memory, lambda memory: run_forget(memory, ForgetCommand(record_id), context),
             as_json)

    @cli.command(name="sweep")
    @click.option("--scope", required=True, metavar="org|repo|channel|<kind>|all",
                  help="Which shared scope to sweep.")
    @repo_option
    @channel_option
    @extra_option
    @click.option("--dry-run", is_flag=True, help="Only list what would be swept.")
    @as_option
    @operator_option
    @json_option
    @click.pass_obj
    def sweep_command(state: CliState, scope: str, repo: str | None, channel: str | None,
                      extra: dict[str, str], dry_run: bool, caller: str, operator: bool,
                      as_json: bool) -> None:
        """Retire stored facts that the status gate would refuse today."""
        _acting(caller, channel, operator)
        from scopemem.chat.commands import CommandContext, run_sweep

        memory = _memory(state)
        allowed = [*(word for word in scope_words(memory.scope_kinds) if word != ME), ALL]
        checked = _scope(memory, scope, allowed) or ALL
        _durable(memory)
        command = SweepCommand(scope=checked, repo=repo, dry_run=dry_run)
        context = CommandContext(caller=caller, channel_id=channel, extra=extra, machine=True,
                                 markdown=False)
        _run(memory, lambda memory: run_sweep(memory, command, context), as_json)

    @cli.command(name="remember")
    @click.argument("text")
    @click.option("--scope", required=True, metavar="me|org|repo|channel|<kind>",
                  help="Where the fact belongs.")
    @click.option("--supersedes", metavar="ID",
                  help="A record of the same scope this fact replaces (mem:<scope>:<n>).")
    @repo_option
    @channel_option
    @extra_option
    @as_option
    @operator_option
    @json_option
    @click.pass_obj
    def remember_command(state: CliState, text: str, scope: str, supersedes: str | None,
                         repo: str | None, channel: str | None, extra: dict[str, str],
                         caller: str, operator: bool, as_json: bool) -> None:
        """Write one fact a person states, through the same gate as reflection."""
        _acting(caller, channel, operator)
        from scopemem.chat.commands import CommandContext, run_remember

        memory = _memory(state)
        checked = _scope(memory, scope, scope_words(memory.scope_kinds)) or ME
        _durable(memory)
        command = RememberCommand(text=text, scope=checked, supersedes=supersedes, repo=repo)
        context = CommandContext(caller=caller, channel_id=channel, extra=extra, machine=True,
                                 markdown=False)
        _run(memory, lambda memory: run_remember(memory, command, context), as_json)

    @cli.command(name="context")
    @click.argument("brief")
    @click.option("--user", metavar="ID", callback=_platform_id("user", "slack:U0123"),
                  help="The requesting user (e.g. slack:U0123); another person than "
                       "cli:local takes --operator.")
    @channel_option
    @repo_option
    @extra_option
    @click.option("--visibility", type=click.Choice(["public", "private", "dm", "machine"]),
                  help="The origin's visibility.")
    @operator_option
    @json_option
    @click.pass_obj
    def context_command(state: CliState, brief: str, user: str | None, channel: str | None,
                        repo: str | None, extra: dict[str, str], visibility: str | None,
                        operator: bool, as_json: bool) -> None:
        """Print the exact memory block a run with this brief would receive. A preview:
        no record counts as used, no counter grows.

        A scope that fails is named on stderr (a run would go without its records); the
        exit is 1 when every scope failed."""
        from scopemem.chat.commands import Outcome
        from scopemem.core.requests import Request

        if user is not None and f"user:{user}" != DEFAULT_CALLER:
            need_operator(operator, f"--user {user} acts for another person than "
                                    f"{DEFAULT_CALLER}")
        _acting(DEFAULT_CALLER, channel, operator)
        request = Request(text=brief, user_id=user, channel_id=channel, repo=repo,
                          channel_visibility=visibility, extra=extra)
        memory = _memory(state)

        async def preview(memory: Any) -> Outcome:
            if not memory.enabled:
                return Outcome(True, "memory is off: a run gets no block",
                               {"ok": True, "enabled": False, "block": ""})
            result = await memory.context(request, count=False)  # a preview counts nothing
            ok = not result.scopes or len(result.failed) < len(result.scopes)
            warnings = tuple(f"⚠️ memory store read of {key} failed: {reason}"
                             for key, reason in result.failed.items())
            if result.block:
                text = result.block
            elif not ok:
                text = "every scope failed: a run with this brief gets no block"
            elif result.failed:
                text = "nothing matched in the scopes that answered"
            else:
                text = "nothing matched: a run with this brief gets no block"
            data = {"ok": ok, "enabled": True, "block": result.block,
                    "scopes": list(result.scopes), "failed": dict(result.failed)}
            return Outcome(ok, text, data, warnings)

        _run(memory, preview, as_json)
