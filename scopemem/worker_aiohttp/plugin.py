"""``scopemem serve``: run the Memory Worker over the configured store.

Registered through ``scopemem_register_commands`` like every other command. aiohttp and the
application module are imported inside the command, so listing plugins never pays for them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import click

from scopemem.cli.root import CliState
from scopemem.errors import ScopememError
from scopemem.plugins.markers import hookimpl

TOKEN_ENV = "SCOPEMEM_TOKEN"
#: A second bearer that opens GET /metrics only, for a Prometheus scraper (optional).
METRICS_TOKEN_ENV = "SCOPEMEM_METRICS_TOKEN"
#: The shortest bearer token ``serve`` starts with (unless ``--insecure-dev``).
MIN_TOKEN_CHARS = 16

#: The most worker processes ``--workers`` starts.
MAX_WORKERS = 64

WORKER_CLIENT = "worker"
EMBEDDED_DEFAULT = "sqlite"
log = logging.getLogger("scopemem.worker")



#: ``--log-format``'s choices: text lines, or one JSON object a line (``logs.JsonFormatter``).
LOG_FORMATS = ("text", "json")


def _configure_logging(log_format: str = "text") -> None:
    from scopemem.worker_aiohttp.logs import JsonFormatter, install

    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        if log_format == "json":
            for handler in root.handlers:
                handler.setFormatter(JsonFormatter())
    install()


def _say(message: str, log_format: str) -> None:
    """A line on standard output (listening, stopped): as it is, or under ``--log-format
    json`` one JSON object as the log lines are, so a shipper parses every line."""
    if log_format == "json":
        from scopemem.worker_aiohttp.logs import JsonFormatter

        message = JsonFormatter().format(
            logging.LogRecord(log.name, logging.INFO, __file__, 0, message, None, None))
    click.echo(message)


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
    @click.option("--log-format", type=click.Choice(LOG_FORMATS), default="text",
                  show_default=True,
                  help="Log lines as text, or as one JSON object per line (time, level, "
                       "logger, message) for a log shipper.")
    @click.option("--max-connections", type=click.IntRange(1, None), default=None,
                  help="Connections open at once (default: what the open-file limit leaves "
                       "after the store's files).")
    @click.option("--idle-timeout", type=click.FloatRange(0.1, 3600), default=10.0,
                  show_default=True,
                  help="Seconds a connection may take to send a request header, after "
                       "opening or after its last answer.")
    @click.option("--body-timeout", type=click.FloatRange(0.1, 3600), default=30.0,
                  show_default=True, help="Seconds a request may take to send its body.")
    @click.option("--workers", type=click.IntRange(1, MAX_WORKERS), default=1,
                  show_default=True,
                  help="Worker processes answering on the port (each with its own store "
                       "connection; any answers any scope).")
    @click.option("--insecure-dev", is_flag=True,
                  help=f"Start without a {MIN_TOKEN_CHARS}-character token (development "
                       "only: anyone who can reach the port may try short tokens).")
    @click.pass_obj
    def serve(state: CliState, host: str, port: int, data_dir: str | None,
              store_name: str | None, access_log: bool, log_format: str,
              max_connections: int | None,
              idle_timeout: float, body_timeout: float, workers: int,
              insecure_dev: bool) -> None:
        """Serve memory to remote agents over HTTP (the Memory Worker).

        Data routes need ``Authorization: Bearer $SCOPEMEM_TOKEN``; GET /metrics takes it
        or ``$SCOPEMEM_METRICS_TOKEN`` when that is set. With ``$SCOPEMEM_HUB_TOKEN`` set,
        the Memory Hub is served under /hub/ too (docs/hub.md). The store is built
        whether or not memory.enabled is set: the server serves storage, the agents decide
        whether to use it. SIGINT or SIGTERM stops it gracefully.
        """
        import asyncio

        from scopemem.core.text import is_bearer_token
        from scopemem.installation import in_process_store, store_registry
        from scopemem.plugins.host import scope_kinds
        from scopemem.stores.base import StoreSettings, descriptors_held
        from scopemem.worker_aiohttp.app import Limits, create_app, serve_until_signalled
        from scopemem.worker_aiohttp.server import connection_budget

        _configure_logging(log_format)
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
                                 reach_retention_days=config.reach_retention_days,
                                 environ=dict(os.environ), ranking=config.ranking_spec(),
                                 stand_in=in_process_store)
        token = os.environ.get(TOKEN_ENV, "")
        if len(token) < MIN_TOKEN_CHARS:
            problem = ("is not set" if not token
                       else f"is {len(token)} characters; at least {MIN_TOKEN_CHARS} are needed")
            if not insecure_dev:
                raise click.ClickException(
                    f"{TOKEN_ENV} {problem} (a shared worker needs a long random token, e.g."
                    " `python -c 'import secrets; print(secrets.token_urlsafe(32))'`; "
                    "--insecure-dev starts anyway, for development)")
            log.warning("INSECURE: %s %s; started with --insecure-dev, for development "
                        "only%s", TOKEN_ENV, problem,
                        "" if token else ": every data route will answer 401")
        metrics_token = os.environ.get(METRICS_TOKEN_ENV, "")
        for env, value in ((TOKEN_ENV, token), (METRICS_TOKEN_ENV, metrics_token)):
            if value and not is_bearer_token(value):
                raise click.ClickException(f"{env} must be printable ASCII without spaces"
                                           " (what secrets.token_urlsafe makes)")
        if metrics_token and len(metrics_token) < MIN_TOKEN_CHARS and not insecure_dev:
            raise click.ClickException(
                f"{METRICS_TOKEN_ENV} is {len(metrics_token)} characters; at least"
                f" {MIN_TOKEN_CHARS} are needed (or leave it unset: the data token opens"
                " /metrics too)")
        if metrics_token and metrics_token == token:
            raise click.ClickException(
                f"{METRICS_TOKEN_ENV} must differ from the data token: a scraper's token"
                " opens /metrics only (or leave it unset: the data token opens /metrics too)")

        hub_token = _hub_token(token, insecure_dev, metrics_token)

        def build() -> tuple[Any, Any]:
            """The store and the application serving it."""
            try:
                store = registry.get(name)(settings)
            except ScopememError as exc:
                raise click.ClickException(str(exc)) from None
            # A library the store needs and lacks fails every request: stop here, naming it
            # (a database server that is down is no such thing: the store waits for it).
            missing = getattr(store, "missing_library", lambda: None)()
            if missing:
                asyncio.run(store.close())
                raise click.ClickException(missing)
            try:
                return store, create_app(store, token, cap=config.max_records_per_scope,
                                         min_cap=config.cap_floor(),
                                         metrics_token=metrics_token or None,
                                         scope_kinds=scope_kinds(state.pm, config),
                                         hub_token=hub_token, hub_config=config,
                                         plugin_manager=state.pm)
            except ValueError as exc:
                asyncio.run(store.close())
                raise click.ClickException(str(exc)) from None

        def limits_for(store: Any) -> Limits:
            """The connections the open-file limit leaves beside what ``store`` holds."""
            held = descriptors_held(store)
            budget = connection_budget(held)
            if budget.short:
                log.warning("the open-file limit leaves too few descriptors beside the "
                            "store's %d: connections may fail to be accepted; raise it "
                            "(ulimit -n, or LimitNOFILE for a service)", held)
            return Limits(idle_timeout=idle_timeout, body_timeout=body_timeout,
                          max_connections=max_connections or budget.connections,
                          backlog=budget.backlog)

        runner_kwargs: dict[str, Any] = {}
        if not access_log:
            runner_kwargs["access_log"] = None
        if workers > 1:
            _serve_processes(workers, host, port, build, limits_for, runner_kwargs, name,
                             log_format)
            _say("scopemem worker stopped", log_format)
            return

        def ready(url: str) -> None:
            _say(f"scopemem worker listening on {url} (store: {name})", log_format)

        store, app = build()
        runner_kwargs["limits"] = limits_for(store)
        try:
            asyncio.run(serve_until_signalled(app, host, port, on_ready=ready,
                                              **runner_kwargs))
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
        _say("scopemem worker stopped", log_format)


def _hub_token(data_token: str, insecure_dev: bool, metrics_token: str) -> str | None:
    """``SCOPEMEM_HUB_TOKEN`` when the hub is to be served (None: it is not), checked: long
    enough, neither the data token nor the metrics token, and the hub's packages
    installed."""
    from scopemem.hub import HUB_TOKEN_ENV, hub_token_problem

    hub_token = os.environ.get(HUB_TOKEN_ENV, "")
    if not hub_token:
        return None
    problem = hub_token_problem(hub_token, data_token, insecure_dev, metrics_token)
    if problem:
        raise click.ClickException(problem)
    return hub_token


def _serve_processes(workers: int, host: str, port: int,
                     build: Callable[[], tuple[Any, Any]], limits_for: Callable[[Any], Any],
                     runner_kwargs: dict[str, Any], name: str, log_format: str) -> None:
    """``--workers N``: reserve the port, fork N processes that each build the app (and its
    store) and listen on it, supervise them (``workers.py``)."""
    import asyncio

    from scopemem.worker_aiohttp.app import serve_until_signalled
    from scopemem.worker_aiohttp.workers import reserved_port, serve_workers

    if not hasattr(os, "fork"):
        raise click.UsageError("--workers needs a system with fork(); use one process here")
    # A configuration error shows here, once, not as N workers failing: the store is built
    # and closed before anything forks (building one opens nothing for the built-in stores).
    store, _app = build()
    runner_kwargs = {**runner_kwargs, "limits": limits_for(store)}
    asyncio.run(store.close())
    if not getattr(store, "durable", True) and name != "null":
        # Each process would hold records of its own: a write answered by one is missing
        # from the others, and each gives out the same ids for different records.
        raise click.UsageError(
            f"--workers {workers}: the {name} store keeps records in each process, so its"
            " processes would answer with different records under the same ids; serve it"
            " with one process, or serve a store the processes share (sqlite, postgres)")
    try:
        sock = reserved_port(host, port)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
    bound_host, bound_port = sock.getsockname()[:2]

    def run_worker(announce: Callable[[], None]) -> None:
        asyncio.run(serve_until_signalled(build()[1], bound_host, bound_port, reuse_port=True,
                                          on_ready=lambda _url: announce(), **runner_kwargs))

    def ready(url: str) -> None:
        _say(f"scopemem worker listening on {url} (store: {name}, {workers} worker"
             " processes)", log_format)

    status = serve_workers(workers, sock, run_worker, ready)
    if status:
        raise click.ClickException("worker processes kept failing right after starting;"
                                   " see the log above")
