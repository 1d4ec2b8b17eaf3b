"""The ``scopemem`` command line: a click group whose commands all come from plugins.

``scopemem [--config PATH] COMMAND``. The config file comes from ``--config``, else
``$SCOPEMEM_CONFIG``, else ``./scopemem.toml`` when it exists, else the defaults. A user's
mistake is a usage error or one clear line and a non-zero exit, never a traceback.

The command line is the operator's tool: it opens the store with the installation's own
credentials (the data directory, the worker's token), so whoever runs it could read and
change every scope, and its scope gate guards against mistakes, not against them. It acts as
the local person (``user:cli:local``, in no channel) and keeps to what the gate opens to that
person; acting for someone else or on a scope that is not theirs takes ``--operator``
(``need_operator``), a usage error without it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import attrs
import click

from scopemem.errors import ScopememError
from scopemem.plugins.manager import PluginManager, get_plugin_manager

if TYPE_CHECKING:
    from scopemem.config import MemoryConfig


@attrs.define
class CliState:
    """What every command reaches through ``click.pass_obj``."""

    config_path: str | None
    pm: PluginManager
    _config: MemoryConfig | None = None

    def config(self) -> MemoryConfig:
        if self._config is None:
            from scopemem.config import load_config

            try:
                self._config = load_config(self.config_path)
            except ScopememError as exc:
                raise click.ClickException(str(exc)) from None
        return self._config


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def scope_key_param(_ctx: click.Context, _param: click.Parameter, value: str | None
                    ) -> str | None:
    """A click callback: the scope key given (None when none was), checked as every store
    checks it; a usage error naming the parameter otherwise."""
    if value is None:
        return None
    from scopemem.errors import StoreError
    from scopemem.stores.base import check_scope_key

    try:
        check_scope_key(value)
    except StoreError as exc:
        raise click.BadParameter(str(exc)) from None
    return check_kind_prefix(value)


def check_kind_prefix(value: str) -> str:
    """``value`` when it has the ``<kind>:`` every scope kind's keys start with; a usage
    error otherwise. A scope word (``org``, ``me``) given for a key names no scope: it
    would read nothing, or delete nothing, and say so as if the scope were empty."""
    if ":" not in value:
        raise click.BadParameter(
            f"{value!r} is not a scope key: a key is <kind>:<id>, e.g. org:acme, "
            "repo:acme/api, user:slack:U0123 (user:cli:local is the local person's)")
    return value


operator_option = click.option(
    "--operator", is_flag=True,
    help="Act as the operator, beyond the local person's own scopes: for another person "
         "(--as), from a channel (--channel), or on another person's or channel's scope.")


def need_operator(operator: bool, what: str) -> None:
    """A usage error naming ``--operator`` when ``what`` (``"--as user:slack:U1 acts for
    another person"``) was asked for without it."""
    if not operator:
        raise click.UsageError(
            f"{what}; the command line holds the store's own credentials, so that is the "
            "operator's to do: add --operator to do it as the operator")


#: Where ``RootGroup`` keeps the words it was given, for its usage errors.
_ARGS = "scopemem.root_args"


class RootGroup(click.Group):
    """The root group. A mistake in the root options (``--confg``, ``--config`` naming a
    directory, ``--config`` eating the command's name) is found before any command runs,
    so it is a usage error (exit 2) for every command, except one whose class says
    otherwise with ``root_usage_error``: a Claude Code hook, for which exit 2 means "block
    this prompt". The command is looked for among every word given, as the mistake may
    have moved it."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_ARGS] = list(args)
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise self._usage_error(ctx, exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # no command, or an unknown one
            raise self._usage_error(ctx, exc) from None

    def _usage_error(self, ctx: click.Context, exc: click.UsageError) -> click.ClickException:
        if isinstance(exc, click.NoSuchOption) and exc.option_name == "--config":
            # A unit file's natural order (``scopemem serve --config FILE``): say where it goes.
            path = exc.ctx.command_path.partition(" ")[2] if exc.ctx else "COMMAND"
            exc = click.UsageError(f"{exc.message} --config is scopemem's own option, given"
                                   f" before the command: scopemem --config FILE {path}",
                                   exc.ctx)
        for arg in ctx.meta.get(_ARGS, ()):
            handler = getattr(self.commands.get(arg), "root_usage_error", None)
            if handler is not None:
                error: click.ClickException = handler(exc)
                return error
        return exc


def build_cli(pm: PluginManager | None = None) -> click.Group:
    """A fresh root group with every plugin's commands added."""
    manager = pm or get_plugin_manager()

    @click.group(cls=RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
    @click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        envvar="SCOPEMEM_CONFIG",
        help="Configuration file (TOML). Default: $SCOPEMEM_CONFIG, else ./scopemem.toml.",
    )
    @click.version_option(package_name="scopemem")
    @click.pass_context
    def cli(ctx: click.Context, config_path: str | None) -> None:
        """Cross-session memory for chat and coding agents."""
        ctx.obj = CliState(config_path, manager)

    _register_commands(manager, cli)
    return cli


def _register_commands(pm: PluginManager, cli: click.Group) -> None:
    """Each plugin's ``scopemem_register_commands``, in pluggy's order. A plugin that raises
    is a ``PluginError`` naming it; a command name two plugins register is one too, as a
    store's or a provider's is: neither silently replaces the other."""
    from scopemem.errors import PluginError
    from scopemem.plugins.calling import hook_answers

    owners: dict[str, str] = {}
    before = dict(cli.commands)

    def check(name: str) -> None:
        nonlocal before
        for command, value in cli.commands.items():
            if before.get(command) is value:
                continue
            if command in before:
                raise PluginError(f"the command {command!r} is registered twice (by plugin "
                                  f"{owners.get(command, 'a plugin')!r} and plugin {name!r})")
            owners[command] = name
        before = dict(cli.commands)

    hook_answers(pm.hook.scopemem_register_commands, after=check, cli=cli)

def main() -> None:
    try:
        cli = build_cli()
    except ScopememError as exc:
        raise SystemExit(f"Error: {exc}") from None
    cli(prog_name="scopemem")
