"""Claude Code's hook JSON: what arrives on stdin, and what the hook answers on stdout.

Every hook event carries ``session_id``, ``transcript_path``, ``cwd`` and
``hook_event_name`` (plus ``permission_mode`` and, in a subagent, ``agent_id`` and
``agent_type``). ``SessionStart`` adds ``source`` (startup, resume, clear, compact),
``UserPromptSubmit`` the ``prompt``, ``Stop`` ``stop_hook_active``, ``SessionEnd`` a
``reason``. Claude Code adds fields over time, so unknown ones are ignored; the fields a
hook uses are checked, since a payload is input like any other.

``SessionStart`` and ``UserPromptSubmit`` may add context for the model with
``{"hookSpecificOutput": {"hookEventName": ..., "additionalContext": ...}}`` on stdout and
exit 0. ``Stop`` and ``SessionEnd`` answer nothing. Exit 2 would block the prompt (or the
stop), so a hook of ours never uses it.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

#: A hook JSON larger than this is refused: a pasted prompt is large, not unbounded.
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
MAX_PATH_CHARS = 4096
MAX_SESSION_ID_CHARS = 200


class HookEvent(enum.StrEnum):
    """The Claude Code events ``scopemem hook`` answers."""

    SESSION_START = "SessionStart"
    USER_PROMPT_SUBMIT = "UserPromptSubmit"
    STOP = "Stop"
    SESSION_END = "SessionEnd"

    @property
    def reads(self) -> bool:
        """Whether the event gets the advisory block (the others hand off reflection)."""
        return self in (HookEvent.SESSION_START, HookEvent.USER_PROMPT_SUBMIT)


def parse_event(name: str) -> HookEvent:
    """The event a command line names, in Claude Code's spelling or any case of it."""
    for event in HookEvent:
        if name.lower() in (event.value.lower(), event.name.lower().replace("_", "-")):
            return event
    raise PayloadError(f"unknown hook event {name!r}; expected one of "
                       f"{', '.join(event.value for event in HookEvent)}")


class PayloadError(ValueError):
    """The hook input is not what Claude Code sends; the message says why."""


@attrs.frozen(kw_only=True)
class HookPayload:
    """The fields of one hook input that scopemem uses."""

    event: HookEvent
    session_id: str
    transcript_path: str | None = None
    cwd: str | None = None
    prompt: str = ""
    source: str | None = None
    reason: str | None = None
    agent_type: str | None = None


# Characters that end or bend a log line: C0 and C1 controls, the Unicode line breaks.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _text(data: Mapping[str, Any], key: str, *, max_chars: int | None = None,
          required: bool = False) -> str | None:
    value = data.get(key)
    if value is None:
        if required:
            raise PayloadError(f"the hook input has no {key!r}")
        return None
    if not isinstance(value, str):
        raise PayloadError(f"{key!r} must be a string, got {type(value).__name__}")
    if max_chars is not None and len(value) > max_chars:
        raise PayloadError(f"{key!r} is longer than {max_chars} characters")
    if "\x00" in value:
        raise PayloadError(f"{key!r} contains a NUL character")
    return value


def parse_payload(raw: bytes, expected: HookEvent) -> HookPayload:
    """The hook input for ``expected``; ``PayloadError`` when it is not JSON, not an object,
    for another event, or a field has the wrong type."""
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise PayloadError(f"the hook input is larger than {MAX_PAYLOAD_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise PayloadError("the hook input is not UTF-8") from None
    except RecursionError:
        raise PayloadError("the hook input is nested too deeply to read") from None
    except ValueError as exc:
        raise PayloadError(f"the hook input is not JSON ({exc.msg}, line {exc.lineno})"
                           if isinstance(exc, json.JSONDecodeError)
                           else "the hook input is not JSON") from None
    if not isinstance(data, dict):
        raise PayloadError(f"the hook input must be a JSON object, got {type(data).__name__}")
    name = _text(data, "hook_event_name", max_chars=100)
    if name is not None and name != expected.value:
        raise PayloadError(f"the hook input is for {name!r}, but this is the "
                           f"{expected.value} hook (check the event in settings.json)")
    session_id = _text(data, "session_id", max_chars=MAX_SESSION_ID_CHARS, required=True)
    assert session_id is not None
    if not session_id.strip():
        raise PayloadError("'session_id' must not be empty")
    if _CONTROL.search(session_id):  # it is written into log lines: none may be forged
        raise PayloadError("'session_id' holds a control character or a line break")
    prompt = _text(data, "prompt") or ""
    if expected is HookEvent.USER_PROMPT_SUBMIT and "prompt" not in data:
        raise PayloadError("the UserPromptSubmit input has no 'prompt'")
    return HookPayload(
        event=expected,
        session_id=session_id,
        transcript_path=_text(data, "transcript_path", max_chars=MAX_PATH_CHARS),
        cwd=_text(data, "cwd", max_chars=MAX_PATH_CHARS),
        prompt=prompt,
        source=_text(data, "source", max_chars=100),
        reason=_text(data, "reason", max_chars=100),
        agent_type=_text(data, "agent_type", max_chars=200),
    )


def render_output(event: HookEvent, block: str) -> str:
    """What the hook prints: the block as additional context, or nothing at all (an empty
    answer leaves the agent's context exactly as it was)."""
    if not block or not event.reads:
        return ""
    return json.dumps({"hookSpecificOutput": {"hookEventName": event.value,
                                              "additionalContext": block}},
                      ensure_ascii=False)
