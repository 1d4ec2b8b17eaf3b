"""Built-in commands about the installation itself: plugins, stores, config check."""

from __future__ import annotations

import attrs
import click

from scopemem.cli import CliState, echo_json
from scopemem.plugins.manager import plugin_rows
from scopemem.plugins.markers import hookimpl


@hookimpl
def scopemem_register_commands(cli: click.Group) -> None:
    @cli.command(name="plugins")
    @click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
    @click.pass_obj
    def plugins_command(state: CliState, as_json: bool) -> None:
        """List the plugins that loaded and the hooks each implements."""
        rows = plugin_rows(state.pm)
        if as_json:
            echo_json(rows)
            return
        for row in rows:
            version = f" {row['version']}" if "version" in row else ""
            click.echo(f"{row['name']}{version}: {', '.join(row['hooks'])}")

    @cli.command(name="stores")
    @click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
    @click.pass_obj
    def stores_command(state: CliState, as_json: bool) -> None:
        """List the installed stores (``memory.store`` names one)."""
        from scopemem.memory import store_registry

        names = store_registry(state.pm).names()
        if as_json:
            echo_json(names)
        else:
            click.echo("\n".join(names))

    @cli.group(name="config")
    def config_group() -> None:
        """Inspect configuration."""

    @config_group.command(name="check")
    @click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
    @click.pass_obj
    def config_check(state: CliState, as_json: bool) -> None:
        """Validate the configuration and print the effective settings."""
        from scopemem.errors import ScopememError
        from scopemem.memory import store_registry
        from scopemem.plugins.providers import build_provider, parse_model_ref

        config = state.config()
        if config.enabled and config.store not in store_registry(state.pm):
            raise click.ClickException(
                f"memory.store: unknown store {config.store!r}; installed: "
                f"{', '.join(store_registry(state.pm).names())} (plugin may not be installed)"
            )
        if config.model is not None:
            # Building a provider does no I/O, so its options can be checked here, before
            # the first reflection would find the mistake.
            try:
                ref = parse_model_ref(config.model)
                build_provider(state.pm, config, ref)
            except (ValueError, ScopememError) as exc:
                raise click.ClickException(f"memory.model: {exc}") from None
        settings = attrs.asdict(config, recurse=True)
        if as_json:
            echo_json(settings)
            return
        click.echo("configuration is valid")
        for key, value in settings.items():
            click.echo(f"  {key} = {value!r}")
