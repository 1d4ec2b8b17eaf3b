"""``scopemem hook <event>``: Claude Code's hooks, as a command plugin.

``scopemem hook SessionStart`` and ``scopemem hook UserPromptSubmit`` print the advisory
block as additional context; ``scopemem hook Stop`` and ``scopemem hook SessionEnd`` hand
the session's new transcript to a background reflection. Each reads the hook JSON on stdin.

Claude Code reads a hook's exit code: 0 is success, 2 blocks the prompt (or the stop), any
other is a non-blocking error whose stderr the person sees. So a hook of ours never exits 2,
not even for a usage mistake in settings.json (click's usual code): a bad payload or
configuration exits 1 with one line, a store that is down or slow exits 0 with no block,
and a bug is one line on stderr with its traceback in the log, never in the agent's context.
A watchdog ends the process at the deadline (plus a second) whatever is still running.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypeVar

import click

from scopemem.agent_hooks.payload import (
    MAX_PAYLOAD_BYTES,
    HookEvent,
    PayloadError,
    parse_event,
    parse_payload,
)
from scopemem.cli import CliState
from scopemem.config import DEFAULT_CONFIG_FILE, MAX_HOOK_TIMEOUT, MemoryConfig
from scopemem.errors import ScopememError
from scopemem.plugins.markers import hookimpl

if TYPE_CHECKING:
    from scopemem.agent_hooks.runner import HookOutcome
    from scopemem.api.memory import Memory

log = logging.getLogger("scopemem")
T = TypeVar("T")

PREFIX = "scopemem hook"
#: What the watchdog adds to the deadline before it ends the process regardless.
GRACE_SECONDS = 1.0


class _NonBlocking:
    """Usage errors exit 1, not click's 2 (which Claude Code reads as "block"): the hook's
    own, and the root options' before it (``scopemem --confg x hook ...``)."""

    @staticmethod
    def root_usage_error(exc: click.UsageError) -> click.ClickException:
        return click.ClickException(f"{PREFIX}: {exc.format_message()}")

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)  # type: ignore[misc, no-any-return]
        except click.UsageError as exc:
            raise self.root_usage_error(exc) from None


class HookCommand(_NonBlocking, click.Command):
    pass


class HookGroup(_NonBlocking, click.Group):
    """Event names in any case (``SessionStart``, ``sessionstart``, ``session-start``)."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            return command
        try:
            return super().get_command(ctx, parse_event(cmd_name).value)
        except PayloadError:
            return None

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError:
            raise click.ClickException(f"{PREFIX}: unknown hook event {args[0]!r}; expected "
                                       f"one of {', '.join(e.value for e in HookEvent)}"
                                       ) from None


def _config_path(state: CliState) -> str | None:
    """The configuration file this process loaded, as an absolute path the background
    reflection can load too (it may not share the working directory forever)."""
    if state.config_path:
        return str(Path(state.config_path).absolute())
    if Path(DEFAULT_CONFIG_FILE).is_file():
        return str(Path(DEFAULT_CONFIG_FILE).absolute())
    return None


def _finish(outcome: HookOutcome) -> NoReturn:
    # UTF-8 whatever the locale says: Claude Code reads the answer as UTF-8, and a stdout in
    # another encoding (cp1252, ascii) cannot encode every record's text.
    sys.stdout.flush()
    if outcome.stdout:
        sys.stdout.buffer.write((outcome.stdout + "\n").encode("utf-8"))
    sys.stdout.buffer.flush()
    if outcome.summary:
        sys.stderr.write(f"{PREFIX}: {outcome.summary}\n")
    sys.stderr.flush()
    logging.shutdown()
    # Straight out: a store thread stuck in a lock must not keep the agent waiting on exit.
    os._exit(outcome.exit_code)


def _watchdog(seconds: float) -> None:
    def expire() -> None:
        from scopemem.agent_hooks.runner import HookOutcome

        log.warning("[memory] hooks: still running at the deadline; ending without a block")
        _finish(HookOutcome(summary=f"gave up after {seconds:g}s; the agent goes on "
                                    "without memory"))

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()


def _whole(data: bytes) -> bool:
    """Whether ``data`` is one complete JSON value (what Claude Code writes, then nothing)."""
    if not data.rstrip().endswith(b"}"):
        return False
    try:
        json.loads(data)
    except RecursionError:
        return True  # complete or not, parse_payload says what is wrong with it
    except ValueError:
        return False
    return True


def _read_some(fd: int) -> bytes:
    """The next bytes of ``fd``, waiting for them even where the agent handed the hook a
    non-blocking stdin (the watchdog bounds the wait)."""
    import select

    while True:
        try:
            return os.read(fd, 1 << 16)
        except BlockingIOError:
            select.select([fd], [], [])


def _read_stdin() -> bytes:
    """The hook input, read until it is one whole JSON value or the pipe closes: Claude Code
    does not always close a hook's stdin after writing (SessionEnd on /clear), and waiting
    for the end would hold the hook until the watchdog. Past ``MAX_PAYLOAD_BYTES`` the rest
    is read and dropped, so Claude Code never writes into a closed pipe (EPIPE)."""
    if sys.stdin is None or sys.stdin.isatty():
        raise PayloadError("expects Claude Code's hook JSON on stdin")
    fd = sys.stdin.fileno()
    data = bytearray()
    while chunk := _read_some(fd):
        if len(data) > MAX_PAYLOAD_BYTES:
            continue
        data += chunk
        if _whole(bytes(data)):
            break
    return bytes(data[:MAX_PAYLOAD_BYTES + 1])


def _drain_stdin() -> None:
    """Read the input of a hook that has no use for it (memory off), for the same reason."""
    if sys.stdin is not None and not sys.stdin.isatty():
        _read_stdin()


def _guarded(body: Callable[[], HookOutcome], log_path: Callable[[], Path | None]
             ) -> NoReturn:
    """Run one hook; whatever happens, finish with an exit code Claude Code does not read as
    blocking, and no traceback anywhere but the log (``log_path()`` names it, once known)."""
    # Until the log file is known (the configuration names it) lines go nowhere: a hook's
    # stderr is the person's screen, and the summary line says what matters.
    log.handlers[:] = [logging.NullHandler()]
    log.propagate = False
    from scopemem.agent_hooks.runner import HookOutcome

    try:
        outcome = body()
    except (PayloadError, ScopememError) as exc:
        log.warning("[memory] hooks: %s", exc)
        outcome = HookOutcome(exit_code=1, summary=str(exc))
    except Exception as exc:
        log.exception("[memory] hooks: failed")
        where = f"; details in {log_path()}" if log_path() else ""
        outcome = HookOutcome(exit_code=1, summary=f"failed ({type(exc).__name__}){where}")
    _finish(outcome)


def _not_nan(_ctx: click.Context, param: click.Parameter, value: float | None
             ) -> float | None:
    """``FloatRange`` lets ``nan`` through (it compares false with both bounds)."""
    if value is not None and math.isnan(value):
        raise click.BadParameter(f"nan is not in the range 0<x<={MAX_HOOK_TIMEOUT}.",
                                 param=param)
    return value


def _event_command(event: HookEvent) -> click.Command:
    @click.command(name=event.value, cls=HookCommand)
    @click.option("--timeout", type=click.FloatRange(0, MAX_HOOK_TIMEOUT, min_open=True),
                  callback=_not_nan,
                  help="Seconds the store reads may take (default memory.hooks.timeout, 3).")
    @click.pass_obj
    def command(state: CliState, timeout: float | None) -> None:
        log_path: Path | None = None

        def body() -> HookOutcome:
            nonlocal log_path
            from scopemem.agent_hooks.runner import HookOutcome

            config = _load(state)
            limit = timeout or config.hooks.timeout
            # The read's deadline and the watchdog's run from one instant: the time the
            # rest of the hook takes to start (imports, the store) counts against the read,
            # and the watchdog only ends a process stuck past the read's own deadline.
            deadline = time.monotonic() + limit
            _watchdog(limit + GRACE_SECONDS)
            if not config.enabled:  # memory off: no files, no reads, no answer
                _drain_stdin()
                return HookOutcome()
            import asyncio

            from scopemem.agent_hooks.runner import (
                hand_off,
                log_to_file,
                read_block,
                read_config,
                state_dir,
            )
            from scopemem.api.memory import Memory

            directory = state_dir(config, dict(os.environ))
            log_path = log_to_file(directory)
            payload = parse_payload(_read_stdin(), event)
            if not event.reads:
                return hand_off(config, _config_path(state), payload, directory, log_path)
            memory = Memory.from_config(read_config(config), plugin_manager=state.pm,
                                        allow_fallback=False)
            reading = read_block(memory, payload, limit, deadline)
            return asyncio.run(_closing(memory, reading, limit))

        _guarded(body, lambda: log_path)

    command.help = (f"Answer Claude Code's {event.value} hook (hook JSON on stdin)."
                    + (" Prints the memory block as additional context." if event.reads else
                       " Hands the session's new transcript to a background reflection."))
    return command


def _load(state: CliState) -> MemoryConfig:
    try:
        return state.config()
    except click.ClickException as exc:  # CliState's wrapping of a ConfigError
        raise PayloadError(exc.format_message()) from None


async def _closing(memory: Memory, work: Awaitable[T], limit: float) -> T:
    import asyncio

    try:
        return await work
    finally:
        try:
            await asyncio.wait_for(memory.close(), timeout=limit)
        except Exception as exc:  # closing never costs the answer already made
            log.warning("[memory] hooks: closing the store failed: %s", exc)


def _reflect_command() -> click.Command:
    @click.command(name="reflect", cls=HookCommand, hidden=True)
    @click.option("--session", "session_id", required=True)
    @click.option("--transcript", required=True, type=click.Path(dir_okay=False))
    @click.option("--start", type=click.IntRange(0), required=True)
    @click.option("--end", type=click.IntRange(0), required=True)
    @click.option("--cwd")
    @click.option("--agent")
    @click.pass_obj
    def reflect_command(state: CliState, session_id: str, transcript: str, start: int,
                        end: int, cwd: str | None, agent: str | None) -> None:
        """Reflect one part of a session's transcript (started by Stop and SessionEnd)."""
        import asyncio

        from scopemem.agent_hooks.ledger import Ledger
        from scopemem.agent_hooks.runner import HookOutcome, log_to_file, reflect_part, state_dir
        from scopemem.api.memory import Memory

        log_path: Path | None = None

        def body() -> HookOutcome:
            nonlocal log_path
            config = _load(state)
            directory = state_dir(config, dict(os.environ))
            log_path = log_to_file(directory)
            lost = False
            try:
                memory = Memory.from_config(config, plugin_manager=state.pm,
                                            allow_fallback=False)
                lost = asyncio.run(_closing(memory, reflect_part(
                    memory, session_id=session_id, transcript=transcript, start=start,
                    end=end, cwd=cwd, agent=agent), 30.0))
            finally:
                if lost:
                    Ledger(directory).release(session_id, transcript, start, end)
                else:
                    Ledger(directory).finish(session_id, end)
            return HookOutcome()

        _guarded(body, lambda: log_path)

    return reflect_command


def hook_group() -> click.Group:
    @click.group(name="hook", cls=HookGroup)
    def group() -> None:
        """Claude Code hooks: memory at session start and on each prompt, reflection when
        a reply or the session ends. See docs/coding-agents.md."""

    for event in HookEvent:
        group.add_command(_event_command(event))
    group.add_command(_reflect_command())
    return group


@hookimpl
def scopemem_register_commands(cli: click.Group) -> None:
    cli.add_command(hook_group())

