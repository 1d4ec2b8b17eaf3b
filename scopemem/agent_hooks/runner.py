"""One hook's work, apart from the command line: the block under a deadline, the hand-off of
a finished part of the session to reflection, and that reflection in its own process.

Nothing here may hold the agent. The read path runs under the hook's deadline: a worker
that is down or slow costs the block (an empty answer, exit 0) and one summary line.
Reflection takes a model call and store writes, seconds to minutes, so ``Stop`` and
``SessionEnd`` only claim the new part of the transcript and start a detached process
(``scopemem hook reflect``, in a session of its own) that reflects it and exits.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from scopemem.agent_hooks.payload import HookEvent, HookPayload, render_output
from scopemem.config import MemoryConfig
from scopemem.errors import ConfigError

# What one path needs is imported on that path: a hook with memory off imports none of it,
# a prompt's read no transcript nor reflection rule.
if TYPE_CHECKING:
    from scopemem.api.memory import Memory

log = logging.getLogger("scopemem")

LOG_FILE = "hooks.log"
LOG_BYTES = 5 * 1024 * 1024
#: How long a background reflection may take before it gives up (a model call, writes).
REFLECT_TIMEOUT = 600.0
#: Part of the deadline the git remote lookup may use; the rest is for the store.
GIT_SHARE = 0.3


@attrs.frozen
class HookOutcome:
    """What the command prints (``stdout``), its exit code, and one line for stderr."""

    stdout: str = ""
    exit_code: int = 0
    summary: str | None = None


def state_dir(config: MemoryConfig, environ: Mapping[str, str]) -> Path:
    """Where the ledger and the log live: ``memory.hooks.state_dir``, else the XDG state
    directory."""
    if config.hooks.state_dir:
        return Path(config.hooks.state_dir).expanduser().absolute()
    xdg = environ.get("XDG_STATE_HOME", "")
    # A relative one is invalid (the XDG spec): it would put the ledger in the project.
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "state"
    return base / "scopemem" / "hooks"


def log_to_file(directory: Path) -> Path:
    """Send the ``scopemem`` logger's lines to the hooks' log file, and nowhere else: a
    hook's stderr reaches the person's screen, a warning there per prompt would be noise.
    A directory that cannot be made or written is a configuration mistake (``ConfigError``)."""
    path = directory / LOG_FILE
    import logging.handlers

    try:
        directory.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(path, maxBytes=LOG_BYTES,
                                                       backupCount=1, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"the hooks' state directory {directory} cannot be used "
                          f"({exc.strerror or exc}); set memory.hooks.state_dir") from None
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False
    return path


def read_config(config: MemoryConfig) -> MemoryConfig:
    """The settings a hook reads with: the block's budget within ``memory.hooks.max_chars``
    as well as ``memory.max_tokens``. A token is estimated at four characters
    (``core.text.estimate_tokens``) and the budget covers the whole block, so a block of
    ``max_chars // 4`` tokens holds at most ``max_chars`` characters."""
    tokens = min(config.max_tokens, config.hooks.max_chars // 4)
    return attrs.evolve(config, max_tokens=tokens)


def user_id(config: MemoryConfig) -> str | None:
    """The person as the user scope derives them (``<platform>:<subject>``): the configured
    subject, else the login name running the agent; never anything from the hook input."""
    subject = config.hooks.subject
    if subject is None:
        import getpass

        try:
            subject = getpass.getuser()
        except (OSError, KeyError):  # no login name: reads go without the user scope
            log.warning("[memory] hooks: no memory.hooks.subject and no login name; "
                        "no user scope")
            return None
    return f"{config.hooks.platform}:{subject}"


def session_brief(repo: str | None, cwd: str | None) -> str:
    """What a session start is about before anyone typed: its repository and folder."""
    words = [*(repo or "").replace("/", " ").split(), Path(cwd).name if cwd else ""]
    return " ".join(dict.fromkeys(word for word in words if word))


async def read_block(memory: Memory, payload: HookPayload, timeout: float, deadline: float
                     ) -> HookOutcome:
    """The advisory block for a session start or a prompt, by ``deadline``
    (``time.monotonic()``: ``timeout`` seconds after the hook started)."""
    import asyncio

    from scopemem.core.requests import Request
    from scopemem.gitremote import repo_of

    repo = await asyncio.to_thread(repo_of, payload.cwd, timeout * GIT_SHARE)
    brief = (payload.prompt if payload.event is HookEvent.USER_PROMPT_SUBMIT
             else session_brief(repo, payload.cwd))
    request = Request(text=brief, user_id=user_id(memory.config), repo=repo,
                      channel_visibility=memory.config.hooks.visibility)
    try:
        result = await asyncio.wait_for(memory.context(request),
                                        max(deadline - time.monotonic(), 0.01))
    except TimeoutError:
        log.warning("[memory] hooks: %s read timed out after %gs; no block",
                    payload.event.value, timeout)
        return HookOutcome(summary=f"memory read timed out after {timeout:g}s; "
                                   "the agent goes on without memory")
    # The use counts of what was shown are saved in the background; give them what is left.
    await memory.drain(timeout=max(deadline - time.monotonic(), 0.0))
    summary = None
    if result.failed:
        key, reason = next(iter(result.failed.items()))
        summary = (f"memory read of {len(result.failed)} of {len(result.scopes)} scope(s) "
                   f"failed ({key}: {reason}); the block goes without them")
    return HookOutcome(render_output(payload.event, result.block), 0, summary)


def reflect_command(config_path: str | None, payload: HookPayload, start: int, end: int
                    ) -> list[str]:
    """The background reflection's command line (this interpreter, this package)."""
    root = ["--config", config_path] if config_path else []
    return [sys.executable, "-m", "scopemem", *root, "hook", "reflect",
            "--session", payload.session_id, "--transcript", payload.transcript_path or "",
            "--start", str(start), "--end", str(end),
            *(["--cwd", payload.cwd] if payload.cwd else []),
            *(["--agent", payload.agent_type] if payload.agent_type else [])]


def _spawn(command: Sequence[str], log_path: Path) -> int:
    """Start ``command`` detached: its own session (the agent's Ctrl-C and exit do not reach
    it), no stdin, output to the log. Returns its pid; the hook does not wait for it."""
    import subprocess

    with open(log_path, "ab") as out:
        process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=out, start_new_session=True, close_fds=True)
    return process.pid


def hand_off(config: MemoryConfig, config_path: str | None, payload: HookPayload,
             directory: Path, log_path: Path) -> HookOutcome:
    """Claim the transcript's part not yet reflected and start its reflection. A part that
    does not qualify (no tool call, under four turns) is left for the next hook."""
    from scopemem.agent_hooks.ledger import Ledger, SessionState
    from scopemem.agent_hooks.transcript import read_slice, split_run
    from scopemem.core.reflection import should_reflect

    if not config.enabled:
        return HookOutcome()
    if not payload.transcript_path:
        return HookOutcome(summary="the hook input has no transcript_path; nothing reflected")
    if config.model is None:  # left unclaimed: reflected once a model is configured
        return HookOutcome(summary="no memory.model (<provider>/<model>) in the "
                                   "configuration; nothing reflected")
    ledger = Ledger(directory)
    path = payload.transcript_path
    with ledger.locked(payload.session_id):
        state = ledger.read(payload.session_id)
        start = state.claimed if state.transcript == path else 0
        try:
            piece = read_slice(path, start)
        except OSError as exc:
            return HookOutcome(summary=f"cannot read the transcript: {exc.strerror or exc}")
        history, _request, _answer = split_run(piece.turns)
        if piece.empty or not should_reflect(piece.tool_calls, len(history),
                                             payload.agent_type, config.no_reflect_agents):
            return HookOutcome()
        pid = _spawn(reflect_command(config_path, payload, piece.start, piece.end), log_path)
        same = state.transcript == path
        ledger.write(payload.session_id, SessionState(
            path, piece.end, state.finished if same else 0, state.retries if same else 0))
    log.info("[memory] hooks: %s handed bytes %d-%d of session %s to reflection (pid %d)",
             payload.event.value, piece.start, piece.end, payload.session_id[:40], pid)
    return HookOutcome()


async def reflect_part(memory: Memory, *, session_id: str, transcript: str, start: int,
                       end: int, cwd: str | None, agent: str | None) -> bool:
    """Reflect bytes ``start``-``end`` of a transcript (the background process's work).
    True when writes were lost to a store that could not be reached or failed: the part
    is worth reflecting again (``Ledger.release``)."""
    import asyncio

    from scopemem.agent_hooks.transcript import opted_out_between, read_slice, split_run
    from scopemem.api.finished_run import Run
    from scopemem.core.requests import Request
    from scopemem.gitremote import repo_of

    piece = read_slice(transcript, start, stop=end)
    history, request_text, answer = split_run(piece.turns)
    # Only the tail of a huge part was read: a <no-memory> prompt before it still counts.
    skipped_opt_out = (piece.read_from > piece.start
                       and opted_out_between(transcript, piece.start, piece.read_from))
    repo = await asyncio.to_thread(repo_of, cwd, 10.0)
    request = Request(text=request_text, user_id=user_id(memory.config), repo=repo,
                      channel_visibility=memory.config.hooks.visibility)
    run = Run(
        request=request, answer=answer, history=history, tool_calls=piece.tool_calls,
        agent_name=agent, thread_key=f"{memory.config.hooks.platform}:{session_id}"[:200],
        run_id=f"{session_id[:40]}@{end}", no_memory=skipped_opt_out)
    if not memory.enabled:
        return False
    try:
        report = await asyncio.wait_for(memory._reflect_quietly(run), REFLECT_TIMEOUT)
    except TimeoutError:
        log.warning("[memory] hooks: reflection of bytes %d-%d timed out", start, end)
        return False
    await memory.drain(timeout=REFLECT_TIMEOUT)
    return report is not None and report.unavailable_writes > 0
