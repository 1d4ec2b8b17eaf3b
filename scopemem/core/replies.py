"""The JSON value in a model's reply, as chat models wrap it (``core.reflection`` reads the
extractor's answer with ``reply_value``). Pure: text in, a value or ``Unreadable`` out.

A reply that is one JSON value is read as it is (so a fact may say anything, "</think>"
included). Any other reply is read as an answer wrapped in what chat models put around
one: leading reasoning (``<think>…</think>``, as DeepSeek-R1 and Qwen3 write it, or only
the closing tag when the chat template opened the block), then prose and Markdown fences
around the object. The reasoning goes first, whatever braces it holds: a draft in it is
not the answer.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["SEARCH_BUDGET_CHARS", "Unreadable", "reply_value"]


class Unreadable(ValueError):
    """A reply with no JSON value to read; the message says why."""


_REASONING_OPEN = re.compile(r"\s*<(think|thinking)>", re.IGNORECASE)
_REASONING_CLOSE = {tag: re.compile(f"</{tag}>", re.IGNORECASE)
                    for tag in ("think", "thinking")}
_ANY_REASONING_OPEN = re.compile(r"<(?:think|thinking)>", re.IGNORECASE)
_ANY_REASONING_CLOSE = re.compile(r"</(?:think|thinking)>", re.IGNORECASE)
# A fence: three or more backticks or tildes, closed by a run of the same character at least
# as long (or by the end of the reply), on one line or several, with a language tag or none.
_FENCE_RUN = re.compile(r"`{3,}|~{3,}")
_FENCE_TAG = re.compile(r"[ \t]*[A-Za-z][\w.+-]*")
# Where a JSON object can begin: a brace, then (after JSON's whitespace) a key or its end.
_OBJECT_START = re.compile(r'\{[ \t\n\r]*["}]')
# The search for an object in a wrapped answer reads at most this many characters over all
# its attempts (the first attempt is always made): an attempt may read to the end of the
# text, and a hostile reply could otherwise have it read the text once per brace.
SEARCH_BUDGET_CHARS = 1 << 20
_DECODER = json.JSONDecoder()


def _wrapped_answer(raw: str, reason: str) -> Any:
    """The answer in a reply that is not one JSON value. Its leading reasoning is dropped;
    then, in the content of its fenced block when it has exactly one, and else (or when
    that block holds no object with ``facts``) in the rest of the reply: a text that is one
    JSON value is the answer, object or not; otherwise the answer is the object with
    ``facts`` that ``_first_object`` finds in it, else the first object found (refused for
    its shape). Refused with ``reason`` when there is no object."""
    answer = _without_reasoning(raw)
    fenced = _fenced_blocks(answer)
    # Each place with whether it may be one JSON value as a whole (the reply itself was not).
    places = [(fenced[0], True)] if len(fenced) == 1 else []
    places.append((answer, answer is not raw))
    shapeless = None
    for text, whole in places:
        if whole:
            try:
                return json.loads(text)
            except (ValueError, RecursionError):
                pass
        found = _first_object(text)
        if found is not None and "facts" in found:
            return found
        # A fence can open inside a string of the answer ("run ``` first"): what it holds
        # then is a piece of the answer, never the answer.
        if shapeless is None:
            shapeless = found
    if shapeless is None:
        raise Unreadable(reason)
    return shapeless


def _without_reasoning(reply: str) -> str:
    """``reply`` less its leading reasoning blocks; or, when it opens none, less everything
    up to a first closing tag that no opening tag precedes (the chat template opened that
    block). A leading block that never closes leaves no answer: the model ran out of tokens
    while reasoning, and a draft inside the block is not the answer."""
    end = 0
    while opened := _REASONING_OPEN.match(reply, end):
        tag = opened.group(1).lower()
        closed = _REASONING_CLOSE[tag].search(reply, opened.end())
        if closed is None:
            raise Unreadable(f"the reply is only reasoning (its <{tag}> block "
                                     "never closes)")
        end = closed.end()
    if end:
        return reply[end:]
    closed = _ANY_REASONING_CLOSE.search(reply)
    if closed is not None and _ANY_REASONING_OPEN.search(reply, 0, closed.start()) is None:
        return reply[closed.end():]
    return reply


def _fenced_blocks(text: str) -> list[str]:
    """The contents of the first two fenced blocks of ``text`` (enough to tell whether it
    has exactly one), without the language tag after an opening fence. A fence left open
    runs to the end of the text."""
    blocks: list[str] = []
    at = 0
    while len(blocks) < 2 and (opening := _FENCE_RUN.search(text, at)):
        fence = opening.group()
        closing = re.compile(f"{re.escape(fence[0])}{{{len(fence)},}}").search(
            text, opening.end())
        start = opening.end()
        if tag := _FENCE_TAG.match(text, start):
            start = tag.end()
        if closing is None:
            blocks.append(text[start:])
            break
        blocks.append(text[start:closing.start()])
        at = closing.end()
    return blocks


def _first_object(text: str) -> dict[str, Any] | None:
    """The first top-level JSON object in ``text`` that has a ``facts`` key, else the first
    top-level object, else ``None``. Each place an object can begin is tried in order with
    ``raw_decode``; the search goes on after an object it found, never into it, and stops
    once ``SEARCH_BUDGET_CHARS`` are spent (an attempt is charged all it could have read,
    the rest of the text), so its work is bounded on any text."""
    first: dict[str, Any] | None = None
    spent = 0
    at = 0
    while start := _OBJECT_START.search(text, at):
        begin = start.start()
        cost = len(text) - begin
        if spent and spent + cost > SEARCH_BUDGET_CHARS:
            break
        spent += cost
        try:
            data, at = _DECODER.raw_decode(text, begin)
        except (ValueError, RecursionError):
            at = begin + 1
            continue
        if "facts" in data:
            return data  # type: ignore[no-any-return]
        if first is None:
            first = data
    return first


def reply_value(raw: str) -> Any:
    """The JSON value of ``raw``: the reply itself when it is one, else the answer wrapped
    in it (``_wrapped_answer``); ``Unreadable`` when there is none."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return _wrapped_answer(raw, f"the reply is not JSON ({type(exc).__name__})")
