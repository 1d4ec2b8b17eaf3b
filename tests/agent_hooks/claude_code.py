"""Claude Code as the hooks see it: recorded hook payloads, transcripts written in its JSONL
shape, a real git repository, and ``scopemem hook`` run as the agent runs it (a subprocess
with the JSON on stdin)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scopemem.agent_hooks.ledger import Ledger, SessionState

PAYLOADS = Path(__file__).parent / "payloads"
REPO_ROOT = Path(__file__).resolve().parents[2]
GUIDE = REPO_ROOT / "docs" / "coding-agents.md"
GUIDE_CONFIG = "~/.config/scopemem/hooks.toml"


def guide_settings() -> dict[str, Any]:
    """The ``.claude/settings.json`` snippet of docs/coding-agents.md, parsed."""
    section = GUIDE.read_text().split("<!-- settings:start -->", 1)[1].split(
        "<!-- settings:end -->", 1)[0]
    match = re.search(r"```json\n(.*?)```", section, re.DOTALL)
    assert match is not None, "no settings.json snippet in docs/coding-agents.md"
    settings: dict[str, Any] = json.loads(match.group(1))
    return settings


def guide_command(event: str) -> str:
    """The shell command docs/coding-agents.md registers for ``event``."""
    (entry,) = guide_settings()["hooks"][event]
    (hook,) = entry["hooks"]
    assert hook["type"] == "command"
    command: str = hook["command"]
    return command


def payload(event: str, **fields: Any) -> dict[str, Any]:
    """A recorded payload of ``event`` with some fields replaced (paths, ids, prompt)."""
    data: dict[str, Any] = json.loads((PAYLOADS / f"{event}.json").read_text())
    data.update(fields)
    return data


class Transcript:
    """A session transcript file, appended line by line as Claude Code writes it."""

    def __init__(self, path: Path, session_id: str, cwd: Path) -> None:
        self.path = path
        self.session_id = session_id
        self.cwd = str(cwd)
        self._parent: str | None = None
        path.write_text("")

    def _line(self, kind: str, message: Mapping[str, Any], **extra: Any) -> None:
        ident = str(uuid.uuid4())
        entry = {"parentUuid": self._parent, "isSidechain": False, "userType": "external",
                 "cwd": self.cwd, "sessionId": self.session_id, "version": "2.0.14",
                 "gitBranch": "main", "type": kind, "message": dict(message), "uuid": ident,
                 "timestamp": "2026-03-02T10:15:00.000Z", **extra}
        self._parent = ident
        with self.path.open("a") as handle:
            handle.write(json.dumps(entry) + "\n")

    def user(self, text: str) -> None:
        self._line("user", {"role": "user", "content": text})

    def assistant(self, *blocks: Mapping[str, Any], message_id: str | None = None) -> None:
        """One assistant message; Claude Code writes each content block as its own line,
        all with the message's id."""
        message_id = message_id or f"msg_{uuid.uuid4().hex[:24]}"
        for block in blocks:
            self._line("assistant", {
                "id": message_id, "type": "message", "role": "assistant",
                "model": "claude-sonnet-4-5", "content": [dict(block)],
                "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": 12, "output_tokens": 40}},
                requestId=f"req_{uuid.uuid4().hex[:20]}")

    def tool_result(self, tool_use_id: str, text: str, *, is_error: bool = False) -> None:
        self._line("user", {"role": "user", "content": [
            {"tool_use_id": tool_use_id, "type": "tool_result", "content": text,
             "is_error": is_error}]},
            toolUseResult={"stdout": text, "stderr": "", "interrupted": False})

    def raw(self, text: str) -> None:
        with self.path.open("a") as handle:
            handle.write(text)


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(ident: str, command: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": ident, "name": "Bash",
            "input": {"command": command, "description": "Run it"}}


def git_repo(path: Path, remote: str | None = "git@github.com:acme/api.git") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    if remote is not None:
        subprocess.run(["git", "-C", str(path), "remote", "add", "origin", remote], check=True)
    return path


def write_config(path: Path, body: str) -> Path:
    path.write_text(body)
    return path


def run_hook(config: Path | None, event: str, stdin: bytes | str | Mapping[str, Any],
             *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None
             ) -> subprocess.CompletedProcess[str]:
    """``scopemem hook <event>`` as Claude Code runs it: JSON on stdin, output captured."""
    if isinstance(stdin, Mapping):
        stdin = json.dumps(stdin)
    if isinstance(stdin, bytes):
        stdin = stdin.decode("utf-8", errors="surrogateescape")
    environ = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    root = ["--config", str(config)] if config is not None else []
    return subprocess.run([sys.executable, "-m", "scopemem", *root, "hook", event, *args],
                          input=stdin, capture_output=True, text=True, env=environ,
                          cwd=cwd, timeout=60, check=False)


def run_guide_hook(config: Path, event: str, stdin: Mapping[str, Any],
                   env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The hook exactly as docs/coding-agents.md registers it, through a shell as Claude Code
    runs it; only the configuration path and the ``scopemem`` executable are substituted."""
    command = guide_command(event)
    assert command.startswith("scopemem ") and GUIDE_CONFIG in command
    command = command.replace(GUIDE_CONFIG, shlex.quote(str(config))).replace(
        "scopemem ", f"{shlex.quote(sys.executable)} -m scopemem ", 1)
    environ = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return subprocess.run(["bash", "-c", command], input=json.dumps(stdin),
                          capture_output=True, text=True, env=environ, timeout=60, check=False)


def wait_reflected(state_dir: Path, session_id: str, wait: float = 60.0) -> SessionState:
    """Wait until every part of a session handed to reflection has finished (the background
    process records it in the ledger). A wait with a generous bound, not a timing check."""
    ledger = Ledger(state_dir)
    give_up = time.monotonic() + wait
    while True:
        state = ledger.read(session_id)
        if state.claimed and state.finished >= state.claimed:
            return state
        if time.monotonic() > give_up:
            raise AssertionError(f"reflection of {session_id} did not finish: {state}")
        time.sleep(0.05)
