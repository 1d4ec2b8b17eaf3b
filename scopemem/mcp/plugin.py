"""``scopemem mcp``: serve memory to a coding agent over MCP.

Registered through ``scopemem_register_commands`` like every command. The SDK is an extra
(``pip install -e '.[mcp]'`` from the checkout) and is imported only when the command runs,
so a missing SDK is one clear error and never breaks another command.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import sys
from typing import cast

import click

from scopemem.cli import CliState
from scopemem.errors import ScopememError
from scopemem.plugins.markers import hookimpl

INSTALL_HINT = "pip install -e '.[mcp]' from the scopemem checkout"


#: Seconds ``git`` may take to name the working directory's origin remote at startup.
REMOTE_TIMEOUT = 2.0


def _check_sdk() -> None:
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(
            f"scopemem mcp needs the MCP Python SDK (mcp 2.x), which is not installed "
            f"({exc}); install it with: {INSTALL_HINT}") from None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _configure_logging() -> None:
    # stderr only: on stdio, stdout is the protocol's.
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _not_nan(_ctx: click.Context, param: click.Parameter, value: float) -> float:
    """``FloatRange`` lets ``nan`` through (it compares false with both bounds); a drain of
    ``nan`` seconds would wait without end."""
    if math.isnan(value):
        raise click.BadParameter("nan is not in the range 0<=x<=3600.", param=param)
    return value


@hookimpl
def scopemem_register_commands(cli: click.Group) -> None:
    @cli.command(name="mcp")
    @click.option("--transport", type=click.Choice(["stdio", "streamable-http"]),
                  default="stdio", show_default=True, help="How clients connect.")
    @click.option("--host", default="127.0.0.1", show_default=True,
                  help="Address to listen on (streamable-http).")
    @click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535),
                  help="Port to listen on (streamable-http; 0 picks a free one).")
    @click.option("--subject", metavar="NAME",
                  help="Whose memory this is: calls act as user:mcp:NAME "
                       "(default: memory.mcp.subject, else local).")
    @click.option("--repo", metavar="OWNER/NAME",
                  help="The repository scope (default: memory.mcp.repo, else the origin "
                       "remote of the git repository the server starts in).")
    @click.option("--channel", metavar="ID",
                  help="The channel scope (default: memory.mcp.channel).")
    @click.option("--drain-timeout", type=click.FloatRange(0, 3600), default=60.0,
                  show_default=True, callback=_not_nan,
                  help="Seconds to wait at exit for reflections still running.")
    @click.option("--reflect", "reflect_file", metavar="FILE", hidden=True,
                  help="Reflect the run a stdio server handed off in FILE, then exit.")
    @click.pass_obj
    def mcp_command(state: CliState, transport: str, host: str, port: int,
                    subject: str | None, repo: str | None, channel: str | None,
                    drain_timeout: float, reflect_file: str | None) -> None:
        """Serve memory to a coding agent over MCP (stdio, or streamable HTTP).

        Every call acts for the configured identity ([memory.mcp] or the options here),
        never one a client names. The tools: memory_context, memory_search, memory_list,
        memory_remember, memory_forget, memory_reflect (docs/mcp.md)."""
        _check_sdk()
        import anyio
        import attrs

        from scopemem.api.memory import Memory
        from scopemem.config import config_from_mapping
        from scopemem.mcp.operations import Identity
        from scopemem.mcp.server import Transport, serve

        config = state.config()
        if not config.enabled:
            raise click.ClickException(
                "memory is off (memory.enabled is false): the MCP server would have nothing "
                "to serve; see docs/mcp.md for a configuration")
        if repo is None and config.mcp.repo is None:
            # Launched by the agent in the project's folder: its git remote names the repo,
            # as for the coding-agent hooks (``gitremote``); none when there is no remote.
            from scopemem.gitremote import repo_of

            repo = repo_of(os.getcwd(), REMOTE_TIMEOUT)
        identity = Identity.from_settings(config.mcp, subject=subject, repo=repo,
                                          channel=channel)
        try:
            # The options go through the same checks as the [memory.mcp] table.
            config_from_mapping({"memory": {"mcp": attrs.asdict(identity)}})
        except ScopememError as exc:
            raise click.UsageError(str(exc).replace("memory.mcp.", "--")) from None
        if transport == "streamable-http" and not _is_loopback(host):
            raise click.UsageError(
                f"--host {host} is not a loopback address: every client of this server acts "
                f"as {identity.caller}, so it listens on a loopback address only (127.0.0.1 or"
                " another 127.x address, ::1, localhost)")
        try:
            memory = Memory.from_config(config, plugin_manager=state.pm, allow_fallback=False)
        except ScopememError as exc:
            raise click.ClickException(str(exc)) from None
        if transport == "stdio" and not getattr(memory.store, "durable", True):
            anyio.run(memory.close)
            raise click.ClickException(
                f"memory.store = {config.store!r} keeps records in this process only, and a "
                "stdio server lives for one session: everything it learned would be lost "
                "(use a store that keeps them: sqlite, worker)")
        _configure_logging()
        from scopemem.mcp.handoff import HandOff, reflect_handed_off

        if reflect_file is not None:  # a stdio server's reflection, in a process of its own
            try:
                anyio.run(reflect_handed_off, memory, reflect_file)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise click.ClickException(f"--reflect {reflect_file}: not a handed-off "
                                           f"run ({type(exc).__name__}: {exc})") from None
            return
        # A stdio client kills the server's process group as it leaves: each reflection
        # runs in a process of its own (mcp.handoff).
        hand_off = HandOff(state.config_path, identity) if transport == "stdio" else None

        def ready(where: str) -> None:
            click.echo(f"scopemem mcp (pid {os.getpid()}) serving {identity.caller} on {where}",
                       err=True)

        try:
            anyio.run(lambda: serve(memory, identity, transport=cast(Transport, transport),
                                    host=host, port=port, drain_timeout=drain_timeout,
                                    on_ready=ready, hand_off=hand_off))
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
