"""Built-in commands about the installation itself: plugins, stores, config check."""

from __future__ import annotations

import click

from scopemem.cli.root import CliState, echo_json
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
        from scopemem.installation import store_registry

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
        """Validate the configuration and print the settings in effect.

        Every table is checked by the plugin that owns it, exactly as a bot's
        ``Memory.from_config`` checks it; the settings are printed as TOML (defaults
        included), a file that loads back as the same configuration."""
        from scopemem.config import CONFIG_ENV, DEFAULT_CONFIG_FILE, config_file
        from scopemem.errors import ScopememError
        from scopemem.installation import check_plugin_tables, effective_settings, effective_toml

        config = state.config()
        try:
            tables = check_plugin_tables(config, state.pm)
        except ScopememError as exc:
            raise click.ClickException(str(exc)) from None
        if as_json:
            echo_json(effective_settings(config, tables))
            return
        path = config_file(state.config_path)
        if path is None:
            click.echo(f"# no configuration file (no --config, ${CONFIG_ENV} or"
                       f" ./{DEFAULT_CONFIG_FILE}): the defaults are in effect:")
        else:
            # One comment line, whatever the name holds: the output loads back as TOML.
            name = " ".join(path.splitlines())
            click.echo(f"# {name}: the configuration is valid; the settings in effect:")
        click.echo(effective_toml(config, tables), nl=False)
