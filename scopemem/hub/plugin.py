"""``scopemem hub``: the Memory Hub alone, over the configured store.

For an installation without a worker (the embedded SQLite store, PostgreSQL reached
directly), or an operator who wants the hub on their own machine. The worker serves the same
hub under ``/hub/`` when ``SCOPEMEM_HUB_TOKEN`` is set. aiohttp and the templates are
imported inside the command, so listing plugins never pays for them.
"""

from __future__ import annotations

import os

import click

from scopemem.cli.root import CliState
from scopemem.errors import ScopememError
from scopemem.plugins.markers import hookimpl


@hookimpl
def scopemem_register_commands(cli: click.Group) -> None:
    @cli.command(name="hub")
    @click.option("--host", default="127.0.0.1", show_default=True,
                  help="Address to listen on.")
    @click.option("--port", default=8788, show_default=True, type=click.IntRange(0, 65535),
                  help="Port to listen on (0 picks a free one).")
    @click.option("--insecure-dev", is_flag=True,
                  help="Start with a short hub token (development only).")
    @click.pass_obj
    def hub_command(state: CliState, host: str, port: int, insecure_dev: bool) -> None:
        """Serve the Memory Hub over the configured store (log in with
        $SCOPEMEM_HUB_TOKEN). The store is the one memory.store names, opened here: a
        worker client store shows what the worker holds."""
        import asyncio

        from aiohttp import web

        from scopemem.api.memory import Memory
        from scopemem.hub import HUB_TOKEN_ENV, hub_token_problem
        from scopemem.hub.app import install_hub
        from scopemem.hub.shared import PREFIX, hub_config, warn_without_organisation
        from scopemem.stores.base import wall_clock_ms
        from scopemem.worker_aiohttp.server import serve_until_signalled

        token = os.environ.get(HUB_TOKEN_ENV, "")
        if not token:
            raise click.ClickException(f"{HUB_TOKEN_ENV} is not set: the hub needs a token "
                                       "to log in with (a long random one, e.g. `python -c "
                                       "'import secrets; print(secrets.token_urlsafe(32))'`)")
        problem = hub_token_problem(token, os.environ.get("SCOPEMEM_TOKEN", ""), insecure_dev)
        if problem:
            raise click.ClickException(problem)
        try:
            warn_without_organisation(state.config())
            memory = Memory.from_config(hub_config(state.config()), plugin_manager=state.pm,
                                        allow_fallback=False)
        except ScopememError as exc:
            raise click.ClickException(str(exc)) from None
        if not memory.store_is_durable:
            asyncio.run(memory.close())
            raise click.ClickException(
                f"memory.store = {memory.config.store!r} keeps records in this process only:"
                " the hub would show an empty store (use sqlite, postgres or worker)")
        app = web.Application()
        install_hub(app, token, lambda: memory, clock=wall_clock_ms, close=memory.close)

        async def home(_request: web.Request) -> web.StreamResponse:
            raise web.HTTPFound(f"{PREFIX}/")

        app.router.add_get("/", home)

        def ready(url: str) -> None:
            click.echo(f"scopemem hub listening on {url}{PREFIX}/ (store: "
                       f"{memory.config.store})")

        try:
            asyncio.run(serve_until_signalled(app, host, port, on_ready=ready))
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
        click.echo("scopemem hub stopped")
