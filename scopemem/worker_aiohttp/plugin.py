"""``scopemem serve``: run the Memory Worker over the configured store.

Registered through ``scopemem_register_commands`` like every other command. aiohttp and the
application module are imported inside the command, so listing plugins never pays for them.
"""

from __future__ import annotations

import logging
import os

import click

from scopemem.cli import CliState
from scopemem.errors import ScopememError
from scopemem.plugins.markers import hookimpl

TOKEN_ENV = "SCOPEMEM_TOKEN"

WORKER_CLIENT = "worker"
EMBEDDED_DEFAULT = "sqlite"
log = logging.getLogger("scopemem.worker")


def _configure_logging() -> None:
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@hookimpl
def scopemem_register_commands(cli: click.Group) -> None:
    @cli.command(name="serve")
    @click.option("--host", default="127.0.0.1", show_default=True,
                  help="Address to listen on.")
    @click.option("--port", default=8787, show_default=True, type=click.IntRange(0, 65535),
                  help="Port to listen on (0 picks a free one).")
    @click.option("--data", "data_dir", type=click.Path(file_okay=False),
                  help="Data directory of the sqlite store (overrides "
                       "memory.stores.sqlite.path).")
    @click.option("--store", "store_name", metavar="NAME",
                  help="Store to serve. Default: memory.store from the configuration.")
    @click.option("--access-log/--no-access-log", default=True, show_default=True,
                  help="Log one line per request (method, path, status; never bodies).")
    @click.pass_obj
    def serve(state: CliState, host: str, port: int, data_dir: str | None,
              store_name: str | None, access_log: bool) -> None:
        """Serve memory to remote agents over HTTP (the Memory Worker).

        Data routes need ``Authorization: Bearer $SCOPEMEM_TOKEN``. The store is built
        whether or not memory.enabled is set: the server serves storage, the agents decide
        whether to use it. SIGINT or SIGTERM stops it gracefully.
        """
        import asyncio

        from scopemem.installation import store_registry
        from scopemem.stores.base import StoreSettings
        from scopemem.worker_aiohttp.app import create_app, serve_until_signalled

        _configure_logging()
        config = state.config()
        name = store_name or config.store
        if store_name is None and name == WORKER_CLIENT:
            # A bot's configuration names the worker as its store; the worker itself keeps
            # the records, so it serves the embedded default instead of calling itself.
            name = EMBEDDED_DEFAULT
        elif name == WORKER_CLIENT:
            raise click.UsageError("the worker cannot serve the worker client store; "
                                   "choose a store that keeps records, e.g. --store sqlite")
        registry = store_registry(state.pm)
        if name not in registry:
            raise click.ClickException(
                f"store {name!r} is not installed; installed: {', '.join(registry.names())} "
                "(choose one with --store)"
            )
        options = dict(config.store_options(name))
        if data_dir is not None:
            if name == "sqlite":
                options["path"] = data_dir
            else:
                log.warning("--data applies to the sqlite store only; ignored for %r", name)
        settings = StoreSettings(name=name, options=options, cap=config.max_records_per_scope,
                                 retention_days=config.retention_days,
                                 environ=dict(os.environ), ranking=config.ranking_spec())
        token = os.environ.get(TOKEN_ENV, "")
        if not token:
            log.warning("%s is not set: every data route will answer 401", TOKEN_ENV)
        try:
            store = registry.get(name)(settings)
        except ScopememError as exc:
            raise click.ClickException(str(exc)) from None
        try:
            app = create_app(store, token, cap=config.max_records_per_scope,
                             min_cap=config.cap_floor())
        except ValueError as exc:
            asyncio.run(store.close())
            raise click.ClickException(f"{TOKEN_ENV}: {exc}") from None

        def ready(url: str) -> None:
            click.echo(f"scopemem worker listening on {url} (store: {name})")

        runner_kwargs = {} if access_log else {"access_log": None}
        try:
            asyncio.run(serve_until_signalled(app, host, port, on_ready=ready,
                                              **runner_kwargs))
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
        click.echo("scopemem worker stopped")
