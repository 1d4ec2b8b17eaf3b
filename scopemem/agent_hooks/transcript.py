"""Reading a Claude Code transcript: the JSONL file at a hook's ``transcript_path``.

Each line is one JSON object. ``type`` ``user`` lines carry ``message.content`` as a string
(what the person typed) or a list of blocks (``text``, ``tool_result``); ``assistant`` lines
carry a list of blocks (``text``, ``thinking``, ``tool_use`` with an ``id``, a ``name`` and
an ``input``). One assistant message may be split over several lines, one block a line,
so tool calls are counted by their ids. Other line types (summaries, snapshots, system
and progress lines) and subagent lines (``isSidechain``) are not part of the conversation.

The file is read from a byte offset to its last complete line (the agent may be writing
the next one) and is treated as untrusted: a line that is not JSON, or not shaped as above,
is skipped. Tool inputs and results are shortened; reflection keeps only the tail anyway.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from scopemem.core.reflection import NO_MEMORY_MARKER, Turn, opted_out

#: At most this much of a slice is read (its tail): a transcript grows by megabytes of tool
#: output, and reflection keeps only the last ``TRANSCRIPT_TAIL_CHARS`` characters anyway.
MAX_SLICE_BYTES = 8 * 1024 * 1024
TOOL_INPUT_CHARS = 300
TOOL_RESULT_CHARS = 600
MAX_LINE_BYTES = 2 * 1024 * 1024


@attrs.frozen
class TranscriptSlice:
    """The conversation between two byte offsets: its turns in order, the distinct tool
    calls, and ``end``, the offset just past its last complete line."""

    turns: tuple[Turn, ...]
    tool_calls: int
    start: int
    end: int
    #: Where the turns were read from: past ``start`` when only the tail was read.
    read_from: int = attrs.field()

    @read_from.default
    def _read_from(self) -> int:
        return self.start

    @property
    def empty(self) -> bool:
        return not self.turns


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " …"


def _block_text(value: Any) -> str:
    """The text of a tool result's content (a string, or a list of text blocks)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(block["text"] for block in value
                         if isinstance(block, Mapping) and block.get("type") == "text"
                         and isinstance(block.get("text"), str))
    return ""


def _user_turns(content: Any) -> Iterator[Turn]:
    if isinstance(content, str):
        yield Turn("user", content)
        return
    if not isinstance(content, list):
        return
    for block in content:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            yield Turn("user", block["text"])
        elif kind == "tool_result":
            text = _block_text(block.get("content"))
            label = "tool error" if block.get("is_error") is True else "tool"
            if text.strip():
                yield Turn(label, _short(text, TOOL_RESULT_CHARS))


def _assistant_turns(content: Any, tool_ids: set[str]) -> Iterator[Turn]:
    if isinstance(content, str):
        yield Turn("assistant", content)
        return
    if not isinstance(content, list):
        return
    for block in content:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            yield Turn("assistant", block["text"])
        elif kind == "tool_use":
            ident = block.get("id")
            tool_ids.add(ident if isinstance(ident, str) and ident else f"#{len(tool_ids)}")
            name = block.get("name") if isinstance(block.get("name"), str) else "tool"
            try:
                shown = json.dumps(block.get("input"), ensure_ascii=False, default=str)
            except (TypeError, ValueError):
                shown = ""
            yield Turn("tool call", f"{name} {_short(shown, TOOL_INPUT_CHARS)}")


def parse_lines(lines: Sequence[bytes]) -> tuple[list[Turn], int]:
    """The turns and the number of distinct tool calls in transcript lines."""
    turns: list[Turn] = []
    tool_ids: set[str] = set()
    for raw in lines:
        if not raw.strip() or len(raw) > MAX_LINE_BYTES:
            continue
        try:
            entry = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if not isinstance(entry, dict) or entry.get("isSidechain") is True:
            continue
        message = entry.get("message")
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        if entry.get("type") == "user" and entry.get("isMeta") is not True:
            turns.extend(_user_turns(content))
        elif entry.get("type") == "assistant":
            turns.extend(_assistant_turns(content, tool_ids))
    return [turn for turn in turns if str(turn.content).strip()], len(tool_ids)


def read_slice(path: str, start: int = 0, stop: int | None = None,
               max_bytes: int = MAX_SLICE_BYTES) -> TranscriptSlice:
    """The transcript from byte ``start`` to its last complete line before ``stop`` (default:
    the end of the file); ``OSError`` when the file cannot be read. A file shorter than
    ``start`` was replaced: it is read from 0."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if stop is not None:
            size = min(size, stop)
        if start > size:
            start = 0
        begin = max(start, size - max_bytes)
        handle.seek(begin)
        data = handle.read(size - begin)
    cut = data.rfind(b"\n")
    if cut < 0:
        return TranscriptSlice((), 0, start, start)
    data = data[: cut + 1]
    lines = data.split(b"\n")
    if begin > start:
        lines = lines[1:]  # began inside a line: its first part was not read
    turns, tool_calls = parse_lines(lines)
    return TranscriptSlice(tuple(turns), tool_calls, start, begin + cut + 1, begin)


def opted_out_between(path: str, start: int, stop: int) -> bool:
    """Whether the transcript between two byte offsets (the part of a slice before the tail
    that was read) carries ``<no-memory>``: its turns, as ``opted_out`` reads a thread, and
    a line too long to parse as its raw text. Read line by line, never whole."""
    overlap = len(NO_MEMORY_MARKER.encode("utf-8")) * 4
    with open(path, "rb") as handle:
        handle.seek(start)
        remaining = stop - start
        tail = b""  # the end of the previous piece of an over-long line
        while remaining > 0:
            piece = handle.readline(min(MAX_LINE_BYTES + 1, remaining))
            if not piece:
                return False
            remaining -= len(piece)
            whole = not tail and piece.endswith(b"\n") and len(piece) <= MAX_LINE_BYTES
            if whole:
                turns, _calls = parse_lines([piece])
                if opted_out("", turns):
                    return True
                continue
            if opted_out((tail + piece).decode("utf-8", errors="replace"), ()):
                return True
            tail = b"" if piece.endswith(b"\n") else piece[-overlap:]
    return False


def split_run(turns: Sequence[Turn]) -> tuple[list[Turn], str, str]:
    """A slice as reflection's run: the turns before the last thing the person typed
    (history), that prompt (the request), and everything after it as the answer, in order,
    tool calls and results labelled (the lesson is often in a failed call). Without a
    prompt in the slice it is all answer."""
    last_prompt = max((i for i, turn in enumerate(turns) if turn.role == "user"), default=-1)
    after = turns[last_prompt + 1:]
    answer = "\n".join(str(turn.content) if turn.role == "assistant"
                       else f"[{turn.role}] {turn.content}" for turn in after)
    request = str(turns[last_prompt].content) if last_prompt >= 0 else ""
    return list(turns[:max(last_prompt, 0)]), request, answer
