"""Reflection, the pure half: when a run is worth distilling, what the extractor is told and
shown, and how its answer is read.

The extractor is one model call per finished run. It is strict about the envelope (a reply
holding no JSON object with a list of facts is refused and nothing is written), lenient about
what a chat model wraps it in (leading ``<think>`` reasoning, prose, a Markdown fence) and
lenient inside (a malformed fact is dropped and counted, the rest survive). Everything that
leaves the process is passed through ``redact_secrets`` first, and so is everything that
comes back: the extractor is a third-party model too.
"""

from __future__ import annotations

import enum
import math
import re
import unicodedata
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import attrs

from scopemem.core.hygiene import cut_text
from scopemem.core.records import MAX_TEXT_CHARS, Candidate, Kind, Record
from scopemem.core.redaction import Stage, secret_free_keywords
from scopemem.core.replies import Unreadable, reply_value
from scopemem.core.secret_rules import redact_secrets
from scopemem.core.text import is_text, strip_invisible

REFLECT_MIN_TURNS = 4
# A request or thread carrying this (any case) keeps its run out of memory: it is never
# reflected and writes nothing. A chat adapter can offer it as a one-word opt-out.
NO_MEMORY_MARKER = "<no-memory>"
MIN_CONFIDENCE = 0.6
MAX_FACTS = 5
MAX_KEYWORDS = 10
TRANSCRIPT_TAIL_CHARS = 24_000
SHOWN_PER_SCOPE = 8
MAX_OUTPUT_TOKENS = 1024


class Audience(enum.StrEnum):
    """The built-in audiences, named after the built-in scope kinds. A plugin's scope kind
    is an audience too (its name), so ``Reflected.audience`` is a plain string."""

    USER = "user"
    REPO = "repo"
    CHANNEL = "channel"
    ORG = "org"


DEFAULT_AUDIENCE = Audience.ORG.value
# The summary of a thread follows the narrowest audience any of its facts carried, in this
# order for the built-ins (000 item 23: a personal thread's summary stays personal, and one
# level down the same holds for repository- and channel-specific threads).
_BUILTIN_PRECEDENCE = (Audience.USER.value, Audience.REPO.value, Audience.CHANNEL.value)

BUILTIN_AUDIENCE_HINTS: dict[str, str] = {
    "user": 'when it is about the person who asked (their preferences, habits, setup); '
            'phrase it as "this user ..."',
    "repo": "when it is specific to the repository the run worked in (its code, commands, "
            "layout, conventions)",
    "channel": "when it is about what this channel is for or how it works",
}


def audience_order(kinds: Mapping[str, int]) -> list[str]:
    """Every audience reflection may route to, narrowest first (the summary's precedence),
    the default ``org`` last: user, repo, channel, then any other registered kind, the
    narrowest (highest breadth) first. ``kinds`` maps each registered scope kind to its
    breadth."""
    others = sorted((name for name in kinds
                     if name not in _BUILTIN_PRECEDENCE and name != DEFAULT_AUDIENCE),
                    key=lambda name: (-kinds[name], name))
    builtin = [name for name in _BUILTIN_PRECEDENCE if name in kinds]
    return [*builtin, *others, DEFAULT_AUDIENCE]


def should_reflect(
    tool_calls: int, history_turns: int, agent_name: str | None,
    no_reflect_agents: Collection[str] = ("review", "ship"),
) -> bool:
    """Only runs that did real work are distilled: at least one tool call, or a thread
    already ``REFLECT_MIN_TURNS`` turns deep. Agents whose findings describe one change at one
    moment (review, ship) never are, however much work they did."""
    if agent_name is not None and agent_name in no_reflect_agents:
        return False
    return tool_calls >= 1 or history_turns >= REFLECT_MIN_TURNS


_SYSTEM_HEAD = """\
You maintain the long-term memory of a team's agents. You read one finished agent run and \
write down what a future run, on an unrelated task, should know.

A fact is a lesson that stays true after this run is forgotten: something that failed or \
surprised, why it happened, and what to do about it; a command that has to run first; a \
convention of the code, the team or the person. Write each fact as one plain sentence in \
that shape: what fails or surprises, why, and what to do.

Never record the state of one change at one moment. Pull-request or issue numbers as the \
subject, commit SHAs, test or check counts, CI results, review verdicts, "approved at", \
"merged", "now supports", "was added" — all of that is ephemeral by definition and is never \
a fact. If the run taught nothing durable, return no facts.

Give each fact an "audience":
"""

_SYSTEM_TAIL = """
You are shown existing memory records with their ids. If a fact corrects one of them, set \
"supersedes" to that id. If a fact says the same thing as one of them in other words, set \
"restates" to that id instead of repeating it. Use only ids you were shown.

Also write a short "summary" of the run: what was asked and what was concluded. Keep the \
summary impersonal; anything personal belongs in a "user" fact.

Answer with JSON only, exactly this shape:
{"facts": [{"text": "...", "confidence": 0.0-1.0, "audience": "org", "keywords": ["..."], \
"supersedes": "<shown id, optional>", "restates": "<shown id, optional>"}], "summary": "..."}
At most 5 facts. Use confidence below 0.6 for anything you are unsure of."""


def reflection_system(audiences: Sequence[str] = (*_BUILTIN_PRECEDENCE, DEFAULT_AUDIENCE),
                      hints: Mapping[str, str] | None = None) -> str:
    """The extractor's system prompt, offering ``audiences`` (``audience_order``'s list:
    narrowest first, ``org`` last) with a hint for each: ``hints`` by name (a plugin kind's
    ``ScopeKind.description``), else the built-in hint, else a generic one."""
    given = dict(hints or {})
    lines = []
    for name in audiences:
        if name == DEFAULT_AUDIENCE:
            continue
        hint = given.get(name) or BUILTIN_AUDIENCE_HINTS.get(name) or (
            f"when it is specific to this {name} and to nothing wider")
        lines.append(f'- "{name}" {hint};')
    lines.append(f'- "{DEFAULT_AUDIENCE}" for knowledge the whole organisation shares '
                 "(the default).")
    return _SYSTEM_HEAD + "\n".join(lines) + "\n" + _SYSTEM_TAIL


REFLECTION_SYSTEM = reflection_system()


# --- the input ---------------------------------------------------------------------------------


def opted_out(request_text: str,
              history: Sequence[Turn | Mapping[str, Any] | tuple[str, Any]]) -> bool:
    """Whether the request or any turn of its thread carries ``NO_MEMORY_MARKER``, read as
    it renders: in any case, its invisible characters gone, compatibility forms folded
    (``＜no-memory＞``) and the entities a chat platform escapes ``<`` and ``>`` with
    (Slack's ``&lt;no-memory&gt;``) read as the brackets."""
    texts = [request_text, *(turn_text(_as_turn(turn).content) for turn in history)]
    return any(NO_MEMORY_MARKER in _as_rendered(text) for text in texts if text)


def _as_rendered(text: str) -> str:
    text = strip_invisible(text)
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    return text.lower().replace("&lt;", "<").replace("&gt;", ">")


@attrs.frozen
class Turn:
    """One message of the thread: its role and its content (a string, or a list of parts as
    chat APIs send them; only text parts are kept)."""

    role: str
    content: Any


def turn_text(content: Any) -> str:
    """The text of a message; images and other non-text parts are dropped."""
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        text = content.get("text")
        if content.get("type", "text") == "text" and isinstance(text, str):
            return text
        return ""
    if isinstance(content, Iterable):
        return "\n".join(part for part in (turn_text(item) for item in content) if part)
    return ""


def _as_turn(turn: Turn | Mapping[str, Any] | tuple[str, Any]) -> Turn:
    if isinstance(turn, Turn):
        return turn
    if isinstance(turn, Mapping):
        return Turn(str(turn.get("role", "user")), turn.get("content", ""))
    role, content = turn
    return Turn(str(role), content)


def _one_line(text: str) -> str:
    """``text`` with its invisible characters dropped and every run of whitespace, line
    breaks and separators included, one space."""
    return " ".join(strip_invisible(text).split())


def build_reflection_input(
    shown: Sequence[Record],
    history: Sequence[Turn | Mapping[str, Any] | tuple[str, Any]],
    request_text: str,
    answer: str,
    redact: Callable[[str], str] = redact_secrets,
) -> str:
    """The extractor's single user message: the existing records of every scope the run has
    (with ids, so it can supersede or restate them), then the transcript. The transcript
    keeps its tail (where the decision usually is) within ``TRANSCRIPT_TAIL_CHARS``. The whole
    message is passed through ``redact`` (the host's full rule set; the core's own by
    default) before it leaves the process."""
    lines = ["Existing memory records (id, scope, kind: text):"]
    if shown:
        # One line each, whatever a record's text holds: a record that broke lines could
        # add shown records (ids of its choosing) or a transcript to what the model reads.
        lines.extend(f"- {r.id} ({r.scope_key}, {r.kind.value}): {_one_line(r.text)}"
                     for r in shown)
    else:
        lines.append("- none")
    transcript_parts = []
    for turn in (_as_turn(t) for t in history):
        text = turn_text(turn.content).strip()
        if text:
            transcript_parts.append(f"[{turn.role}] {text}")
    transcript_parts.append(f"[request] {request_text.strip()}")
    transcript_parts.append(f"[answer] {answer.strip()}")
    transcript = "\n\n".join(transcript_parts)
    if len(transcript) > TRANSCRIPT_TAIL_CHARS:
        transcript = "[… earlier turns omitted …]\n" + transcript[-TRANSCRIPT_TAIL_CHARS:]
    lines.extend(["", "Transcript of the run:", transcript])
    return redact("\n".join(lines))


# --- the output --------------------------------------------------------------------------------


class ReflectionRejected(ValueError):
    """The extractor's answer is not the envelope asked for; nothing is written."""


@attrs.frozen
class Reflected:
    """A candidate and the audience the extractor tagged it with, a scope kind's name
    (reflection-internal: the audience is never sent to a store)."""

    candidate: Candidate
    audience: str


@attrs.frozen
class Reflection:
    facts: tuple[Reflected, ...]
    summary: Reflected | None
    dropped: int
    # Why facts were dropped: reason → how many (the reasons ``parse_reflection`` names).
    drop_reasons: Mapping[str, int] = attrs.field(factory=dict)


def _envelope(raw: str) -> dict[str, Any]:
    if not isinstance(raw, str):
        raise ReflectionRejected("the reply is not text")
    try:
        data = reply_value(raw)
    except Unreadable as exc:
        raise ReflectionRejected(str(exc)) from None
    if not isinstance(data, dict):
        raise ReflectionRejected("the reply is not a JSON object")
    if not isinstance(data.get("facts"), list):
        raise ReflectionRejected("facts is not a list")
    return data


def _keywords(value: Any, redact: Stage, found: list[str]) -> tuple[str, ...] | None:
    """The fact's keywords, each redacted, less those that hold a secret redacted from its
    text (``found``) or from the keywords read together."""
    if not isinstance(value, list):
        return None
    kept: dict[str, None] = {}
    for item in value:
        if isinstance(item, str):
            keyword = redact(item.strip(), None).lower()
            if keyword:
                kept.setdefault(keyword, None)
    return secret_free_keywords(tuple(kept), found, redact)[:MAX_KEYWORDS] or None


def _audience(value: Any, audiences: Collection[str]) -> str:
    # Every audience is a kind's lowercase name: "User" or " repo " is read as meant.
    if not isinstance(value, str):
        return DEFAULT_AUDIENCE
    value = value.strip().lower()
    return value if value in audiences else DEFAULT_AUDIENCE


# A confidence a model wrote as a string: a decimal number in ASCII digits ("0.9", "1",
# ".75", "8e-1"), nothing else ("90%", "high", "nan", "0x1", "٠٫٩" are refused).
_NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")


def _confidence(value: Any) -> float | None:
    if isinstance(value, str):
        value = value.strip()
        if len(value) > 32 or not _NUMBER_TEXT.fullmatch(value):
            return None
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if math.isnan(value) or not MIN_CONFIDENCE <= value <= 1:
        return None
    return float(value)


def _shown_pointer(value: Any, shown_ids: Collection[str]) -> str | None:
    # Whitespace around an id is no part of it, as in a person's forget or --supersedes.
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value if value in shown_ids else None


def parse_reflection(
    raw: str, *, shown_ids: Collection[str], thread_key: str, run_id: str | None,
    audiences: Sequence[str] = (*_BUILTIN_PRECEDENCE, DEFAULT_AUDIENCE),
    redact: Stage = redact_secrets,
) -> Reflection:
    """Read the extractor's reply. Raises ``ReflectionRejected`` for a bad envelope (the
    JSON object is the reply itself, or the one found in a wrapped reply: see
    ``_wrapped_answer``); inside, a fact without non-empty text or with a confidence outside
    [0.6, 1] (a number, or a string holding a decimal number), or whose text is
    not valid Unicode (a lone surrogate), is dropped and counted with its reason. At most
    five facts survive; pointers survive only when they name a shown id; a missing or
    unknown audience (one not in ``audiences``, narrowest first as ``audience_order`` gives
    them) is org; the summary takes the narrowest audience any fact carried, so a personal
    thread's summary stays personal. Every text and keyword is passed through ``redact``
    (as in ``build_reflection_input``), the keywords in the context of the fact's original
    text (``password=hunter2`` drops the keyword ``hunter2``, as the write boundary does)."""
    data = _envelope(raw)
    facts: list[Reflected] = []
    reasons: dict[str, int] = {}

    def drop(reason: str) -> None:
        reasons[reason] = reasons.get(reason, 0) + 1

    for item in data["facts"]:
        if not isinstance(item, dict):
            drop("malformed")
            continue
        text = item.get("text")
        confidence = _confidence(item.get("confidence"))
        if not isinstance(text, str) or not text.strip() or confidence is None:
            drop("malformed")
            continue
        if not is_text(text):
            # A lone surrogate: no store can keep it; this fact alone is lost, never the
            # batch.
            drop("not text")
            continue
        if len(facts) == MAX_FACTS:
            drop("over five")
            continue
        found: list[str] = []
        facts.append(Reflected(
            Candidate(
                kind=Kind.FACT,
                text=cut_text(redact(text.strip(), found), MAX_TEXT_CHARS),
                source_thread_key=thread_key,
                source_run_id=run_id,
                keywords=_keywords(item.get("keywords"), redact, found),
                confidence=confidence,
                supersedes=_shown_pointer(item.get("supersedes"), shown_ids),
                restates=_shown_pointer(item.get("restates"), shown_ids),
            ),
            _audience(item.get("audience"), audiences),
        ))
    summary = None
    text = data.get("summary")
    if isinstance(text, str) and text.strip():
        tagged = {fact.audience for fact in facts}
        narrowest = next((a for a in audiences if a in tagged), DEFAULT_AUDIENCE)
        summary = Reflected(
            Candidate(kind=Kind.SUMMARY,
                      text=cut_text(redact(text.strip(), None), MAX_TEXT_CHARS),
                      source_thread_key=thread_key, source_run_id=run_id),
            narrowest,
        )
    return Reflection(facts=tuple(facts), summary=summary, dropped=sum(reasons.values()),
                      drop_reasons=reasons)

