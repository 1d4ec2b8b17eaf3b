"""The human memory commands on the command line: list, forget, sweep, remember, context.

They share the chat grammar's rules (``scopemem.core.commands``) and its executor
(``scopemem.commands``), act as ``user:cli:local`` unless ``--as`` names another user scope,
and run against the configured store (an SQLite directory or a worker URL). Human output by
default, ``--json`` for scripts; a refusal or failure exits 1, a usage error 2.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import click

from scopemem.cli import CliState, echo_json
from scopemem.commands import (
    CommandContext,
    Outcome,
    run_forget,
    run_list,
    run_remember,
    run_sweep,
)
from scopemem.core.commands import (
    DEFAULT_LIST_LIMIT,
    MAX_LIST_LIMIT,
    SWEEP_SCOPES,
    ForgetCommand,
    ListCommand,
    ListScope,
    SweepCommand,
)
from scopemem.errors import ScopememError
from scopemem.plugins.markers import hookimpl

DEFAULT_CALLER = "user:cli:local"


def _caller(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    from scopemem.commands import caller_problem

    problem = caller_problem(value)
    if problem:
        raise click.BadParameter(problem)
    return value


def _run(state: CliState, action: Callable[[Any], Awaitable[Outcome]], as_json: bool) -> None:
    from scopemem.memory import Memory

    async def main() -> Outcome:
        try:
            memory = Memory.from_config(state.config(), plugin_manager=state.pm)
        except ScopememError as exc:
            raise click.ClickException(str(exc)) from None
        try:
            return await action(memory)
        finally:
            await memory.close()

    outcome = asyncio.run(main())
    if as_json:
        echo_json(outcome.data)
    else:
        click.echo(outcome.text, err=not outcome.ok)
    if not outcome.ok:
        sys.exit(1)


as_option = click.option("--as", "caller", default=DEFAULT_CALLER, show_default=True,
                         callback=_caller, help="Act as this user scope (user:<platform>:<id>).")
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
repo_option = click.option("--repo", metavar="OWNER/NAME", help="The repository scope to use.")
channel_option = click.option("--channel", metavar="ID",
                              help="The channel id (platform-namespaced, e.g. slack:C0456).")


@hookimpl
def scopemem_register_commands(cli: click.Group) -> None:
    @cli.command(name="list")
    @click.argument("words", nargs=-1)
    @click.option("--scope", type=click.Choice([s.value for s in ListScope]),
                  help="Which scope to list (default all; a leading scope word works too).")
    @click.option("--limit", type=click.IntRange(1, MAX_LIST_LIMIT), default=DEFAULT_LIST_LIMIT,
                  show_default=True, help="Records per scope.")
    @repo_option
    @channel_option
    @as_option
    @json_option
    @click.pass_obj
    def list_command(state: CliState, words: tuple[str, ...], scope: str | None, limit: int,
                     repo: str | None, channel: str | None, caller: str, as_json: bool) -> None:
        """List active records, newest first; WORDS filter by whole words.

        As in chat, a leading scope word (``scopemem list org deploy``) names the scope when
        --scope is not given."""
        rest = list(words)
        if scope is None:
            scope = rest.pop(0).lower() if rest and rest[0].lower() in set(ListScope) else "all"
        command = ListCommand(scope=ListScope(scope), limit=limit,
                              query=" ".join(rest) if rest else None, repo=repo)
        context = CommandContext(caller=caller, channel_id=channel)
        _run(state, lambda memory: run_list(memory, command, context), as_json)

    @cli.command(name="forget")
    @click.argument("record_id", metavar="ID")
    @as_option
    @json_option
    @click.pass_obj
    def forget_command(state: CliState, record_id: str, caller: str, as_json: bool) -> None:
        """Forget one record (mem:<scope>:<n>); it stays stored, invisible to every read."""
        context = CommandContext(caller=caller)
        _run(state, lambda memory: run_forget(memory, ForgetCommand(record_id), context),
             as_json)

    @cli.command(name="sweep")
    @click.option("--scope", type=click.Choice([s.value for s in SWEEP_SCOPES]), required=True,
                  help="Which shared scope to sweep.")
    @repo_option
    @channel_option
    @click.option("--dry-run", is_flag=True, help="Only list what would be swept.")
    @as_option
    @json_option
    @click.pass_obj
    def sweep_command(state: CliState, scope: str, repo: str | None, channel: str | None,
                      dry_run: bool, caller: str, as_json: bool) -> None:
        """Retire stored facts that the status gate would refuse today."""
        command = SweepCommand(scope=ListScope(scope), repo=repo, dry_run=dry_run)
        context = CommandContext(caller=caller, channel_id=channel)
        _run(state, lambda memory: run_sweep(memory, command, context), as_json)

    @cli.command(name="remember")
    @click.argument("text")
    @click.option("--scope", type=click.Choice(["me", "org", "repo", "channel"]),
                  required=True, help="Where the fact belongs.")
    @repo_option
    @channel_option
    @as_option
    @json_option
    @click.pass_obj
    def remember_command(state: CliState, text: str, scope: str, repo: str | None,
                         channel: str | None, caller: str, as_json: bool) -> None:
        """Write one fact a person states, through the same gate as reflection."""
        context = CommandContext(caller=caller, channel_id=channel)
        _run(state, lambda memory: run_remember(memory, text, ListScope(scope), context,
                                                repo=repo), as_json)

    @cli.command(name="context")
    @click.argument("brief")
    @click.option("--user", metavar="ID", help="The requesting user (e.g. slack:U0123).")
    @channel_option
    @repo_option
    @click.option("--visibility", type=click.Choice(["public", "private", "dm", "machine"]),
                  help="The origin's visibility.")
    @json_option
    @click.pass_obj
    def context_command(state: CliState, brief: str, user: str | None, channel: str | None,
                        repo: str | None, visibility: str | None, as_json: bool) -> None:
        """Print the exact memory block a run with this brief would receive."""
        from scopemem.core.requests import Request

        request = Request(text=brief, user_id=user, channel_id=channel, repo=repo,
                          channel_visibility=visibility)

        async def preview(memory: Any) -> Outcome:
            if not memory.enabled:
                return Outcome(True, "memory is off: a run gets no block",
                               {"ok": True, "enabled": False, "block": ""})
            block = await memory.context_block(request)
            text = block or "nothing matched: a run with this brief gets no block"
            return Outcome(True, text, {"ok": True, "enabled": True, "block": block,
                                        "scopes": memory.scope_keys(request)})

        _run(state, preview, as_json)
