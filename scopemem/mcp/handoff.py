"""A stdio server's reflections, each run by a process of its own.

A stdio client ends its server when it leaves: it closes stdin, SIGTERMs the server's
process group two seconds later and SIGKILLs it two seconds after that (the SDK's shutdown,
as the MCP specification has it). A reflection still waiting for its model then died with
the server, and the session's lessons with it; agents call ``memory_reflect`` exactly as a
session ends. So a stdio server hands each session to ``scopemem mcp --reflect FILE``,
started in a session of its own, which no signal to the server's group reaches (as the
coding-agent hooks start theirs): the file holds the run and whom it is for, readable by
its owner only; the process deletes it, reflects the run, logs its ``[memory]`` line on the
server's stderr while that is open, and exits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from scopemem.api.finished_run import Run
from scopemem.api.memory import Memory
from scopemem.mcp.operations import Identity

__all__ = ["HandOff", "load_run", "reflect_handed_off"]

#: The most a handed-off reflection may take (the model's call and the writes).
REFLECT_TIMEOUT = 600.0


class HandOff:
    """Starts each reflection of a server acting as ``identity`` in its own process."""

    def __init__(self, config_path: str | None, identity: Identity) -> None:
        self.config_path = config_path
        self.identity = identity
        self._started: list[subprocess.Popen[bytes]] = []

    def running(self) -> int:
        """How many of the reflections started are still running."""
        self._started = [process for process in self._started if process.poll() is None]
        return len(self._started)

    def __call__(self, run: Run) -> None:
        # The server's runs carry their turns as {"role", "content"} (operations.reflect).
        history = [dict(turn) for turn in run.history if isinstance(turn, Mapping)]
        fd, path = tempfile.mkstemp(prefix="scopemem-mcp-reflect-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"identity": attrs.asdict(self.identity), "request": run.request.text,
                       "answer": run.answer, "history": history, "tool_calls": run.tool_calls,
                       "thread_key": run.thread_key, "run_id": run.run_id}, out)
        root = ["--config", self.config_path] if self.config_path else []
        try:
            self._started.append(subprocess.Popen(
                [sys.executable, "-m", "scopemem", *root, "mcp", "--reflect", path],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True,
                close_fds=True))
        except OSError:
            Path(path).unlink(missing_ok=True)
            raise


def load_run(path: str) -> Run:
    """The run a ``HandOff`` wrote to ``path``, which is deleted once read."""
    try:
        data: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    finally:
        Path(path).unlink(missing_ok=True)
    identity = Identity(**data["identity"])
    return Run(request=identity.request(data["request"]), answer=data["answer"],
               history=data["history"], tool_calls=data["tool_calls"],
               thread_key=data["thread_key"], run_id=data["run_id"])


async def reflect_handed_off(memory: Memory, path: str) -> None:
    """``scopemem mcp --reflect FILE``: reflect the run a ``HandOff`` wrote, then close."""
    try:
        memory.schedule_reflection(load_run(path))
        await memory.drain(timeout=REFLECT_TIMEOUT)
    finally:
        await memory.close()
