"""The ``scopemem`` command line: a click group whose commands all come from plugins.

``scopemem [--config PATH] COMMAND``. The config file comes from ``--config``, else
``$SCOPEMEM_CONFIG``, else ``./scopemem.toml`` when it exists, else the defaults. A user's
mistake is a usage error or one clear line and a non-zero exit, never a traceback.
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
        return check_scope_key(value)
    except StoreError as exc:
        raise click.BadParameter(str(exc)) from None


def build_cli(pm: PluginManager | None = None) -> click.Group:
    """A fresh root group with every plugin's commands added."""
    manager = pm or get_plugin_manager()

    @click.group(context_settings={"help_option_names": ["-h", "--help"]})
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

    manager.hook.scopemem_register_commands(cli=cli)
    return cli


def main() -> None:
    try:
        cli = build_cli()
    except ScopememError as exc:
        raise SystemExit(f"Error: {exc}") from None
    cli(prog_name="scopemem")
