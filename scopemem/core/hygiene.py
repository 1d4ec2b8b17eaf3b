"""Write hygiene: what a candidate is made into before any store sees it.

Candidates come from several producers: the extractor (through reflection), a person's
``remember``, an integrator calling a store directly. Whatever the producer, a candidate must
fit the record contract that the wire spells out (``MAX_TEXT_CHARS``, ``MAX_KEYWORDS``,
``MAX_KEYWORD_CHARS``, a non-empty ``sourceThreadKey``, text that encodes as UTF-8), because
a store may be a remote worker that refuses a whole batch for one field over a cap, and one
bad candidate must never cost the others of its batch.

* :func:`fit_candidate` trims and drops what does not fit, from the same caps the worker's
  validator checks (a thread key and a run id are cut to ``MAX_SOURCE_CHARS``, a pointer
  too long to be an id is dropped, a NUL character is removed from every string, since
  PostgreSQL cannot keep one). Every store applies it at its write boundary, so a
  candidate lands the same way on every store, and the worker client applies it before
  anything leaves the process.
* :func:`noise_reason` is the salience rule: a text with nothing worth keeping (empty,
  under ``MIN_TEXT_CHARS`` characters, no letter or digit, a raw telemetry line) is noise.
  Every write drops noise (``screen_candidate`` marks it ``NOISE``, a store drops it and
  answers ``WriteCounts.dropped``), so it never takes a slot.

Redaction, which comes before fitting, is ``scopemem.secrets.redact_candidate`` (its rules
are a library's data); ``stores.base.fit_batch`` applies both.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
import re

import attrs

from scopemem.core.records import (
    MAX_ID_CHARS,
    MAX_KEYWORD_CHARS,
    MAX_KEYWORDS,
    MAX_SOURCE_CHARS,
    MAX_TEXT_CHARS,
    Candidate,
)
from scopemem.core.scopes import pointer_problem
from scopemem.core.text import distinct_tokens, encodable

__all__ = ["MIN_TEXT_CHARS", "NOISE", "NO_THREAD_KEY", "cut_text", "describe_noise",
           "fit_candidate", "fit_keywords", "noise_reason", "without_nul"]

#: The provenance a candidate carries when its producer knew no thread (the wire needs one).
NO_THREAD_KEY = "unthreaded"

#: The marker of a candidate the salience rule drops (a rejection, as the gate's markers are).
NOISE = "noise"
#: The fewest characters a text worth keeping has (surrounding whitespace left out).
MIN_TEXT_CHARS = 3

# A line an agent's harness writes about its own steps, not something learned.
_TELEMETRY = re.compile(r"(?:Tool called:|Tool result for |Step started:|Step completed:)")
# The keys that make a JSON object a raw plan or step (what a harness logs, not a lesson).
_PLAN_KEYS = frozenset({"plan", "step", "steps", "stepId", "step_id"})
_NUL = "\x00"

_NOISE_REASONS = {
    "empty": "the text is empty",
    "short": f"the text is under {MIN_TEXT_CHARS} characters",
    "no_word": "the text has no letter or digit",
    "telemetry": "the text is a raw telemetry line (a tool call, a step, a plan)",
}


def _is_plan_json(text: str) -> bool:
    if text[0] not in "{[" or text[-1] not in "}]":
        return False
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    if isinstance(value, list) and value:
        value = value[0]
    return isinstance(value, dict) and not _PLAN_KEYS.isdisjoint(value)


def noise_reason(text: str) -> str | None:
    """Why ``text`` is noise, or None when it may be kept (the salience rule, applied to
    every write): ``"empty"`` (nothing but whitespace), ``"short"`` (under
    ``MIN_TEXT_CHARS`` characters), ``"no_word"`` (not one letter or digit), or
    ``"telemetry"`` (a line that starts as a harness's tool or step log, ``Tool called:``,
    ``Tool result for``, ``Step started:``, ``Step completed:``, or a raw plan or step as
    JSON). NUL characters are left out, as a store leaves them out."""
    stripped = text.replace(_NUL, "").strip()
    if not stripped:
        return "empty"
    if len(stripped) < MIN_TEXT_CHARS:
        return "short"
    if not any(char.isalnum() for char in stripped):
        return "no_word"
    if _TELEMETRY.match(stripped) or _is_plan_json(stripped):
        return "telemetry"
    return None


def describe_noise(reason: str) -> str:
    """``noise_reason``'s answer in words."""
    return _NOISE_REASONS.get(reason, reason)

_LAST_SPACE = re.compile(r"\s+\S*\Z")


def cut_text(text: str, max_chars: int) -> str:
    """``text`` within ``max_chars``: unchanged when it fits, else cut at the last word
    boundary in the second half of the allowance (or at ``max_chars`` when there is none
    there), trailing whitespace dropped."""
    if len(text) <= max_chars:
        return text
    if text[max_chars].isspace():
        return text[:max_chars].rstrip()
    head = text[:max_chars]
    boundary = _LAST_SPACE.search(head)
    if boundary is not None and boundary.start() >= max_chars // 2:
        return head[:boundary.start()]
    return head


def fit_keywords(keywords: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Keywords the wire accepts, in their order, repeats and blanks dropped: a keyword over
    ``MAX_KEYWORD_CHARS`` gives way to its own tokens that fit (so every word it made
    findable stays findable), then the first ``MAX_KEYWORDS`` are kept. ``None`` (no keywords
    given: the store tokenizes the text) stays ``None``."""
    if keywords is None:
        return None
    kept: dict[str, None] = {}
    for keyword in keywords:
        keyword = encodable(keyword).replace(_NUL, "").strip()
        if not keyword:
            continue
        if len(keyword) <= MAX_KEYWORD_CHARS:
            kept.setdefault(keyword, None)
            continue
        for token in distinct_tokens(keyword):
            if len(token) <= MAX_KEYWORD_CHARS:
                kept.setdefault(token, None)
    return tuple(list(kept)[:MAX_KEYWORDS])


def _clean(value: str) -> str:
    """``value`` as a store can keep it: lone surrogates replaced, NUL characters removed."""
    return encodable(value).replace(_NUL, "")


def _source(value: str) -> str:
    """A thread key or run id, cleaned and cut to ``MAX_SOURCE_CHARS``."""
    return _clean(value)[:MAX_SOURCE_CHARS]


def _pointer(value: str | None) -> str | None:
    """A ``supersedes`` / ``restates`` pointer, cleaned; None when it is too long to be an
    id or is no memory id (``pointer_problem``): it could name no record."""
    if value is None:
        return None
    cleaned = _clean(value)
    if len(cleaned) > MAX_ID_CHARS or pointer_problem(cleaned) is not None:
        return None
    return cleaned


def _strip_nul(value: str | None) -> str | None:
    return None if value is None else value.replace(_NUL, "")


def without_nul(candidate: Candidate) -> Candidate:
    """The candidate with every NUL character removed from every string, before anything
    else looks at it: redaction must see the text as it will be stored, or a secret split
    by a NUL would pass as two harmless halves and be joined again by ``fit_candidate``.
    Returned as it is when it holds none; a text of nothing but NULs becomes U+FFFD."""
    strings = (candidate.text, candidate.source_thread_key, candidate.source_run_id,
               candidate.supersedes, candidate.restates, *(candidate.keywords or ()))
    if not any(value is not None and _NUL in value for value in strings):
        return candidate
    keywords = candidate.keywords
    return attrs.evolve(
        candidate, text=candidate.text.replace(_NUL, "") or "\ufffd",
        source_thread_key=candidate.source_thread_key.replace(_NUL, ""),
        source_run_id=_strip_nul(candidate.source_run_id),
        supersedes=_strip_nul(candidate.supersedes), restates=_strip_nul(candidate.restates),
        keywords=None if keywords is None else tuple(k.replace(_NUL, "") for k in keywords))


def _plain(value: str | None, most: int) -> bool:
    return value is None or (len(value) <= most and value.isascii() and _NUL not in value)


def _fits(candidate: Candidate) -> bool:
    """The common case, decided cheaply (every store's write path asks it of every
    candidate): ASCII strings without NUL within the caps, a thread key, keywords that need
    no change."""
    keywords = candidate.keywords
    return (_plain(candidate.text, MAX_TEXT_CHARS)
            and _plain(candidate.source_thread_key, MAX_SOURCE_CHARS)
            and bool(candidate.source_thread_key.strip())
            and _plain(candidate.source_run_id, MAX_SOURCE_CHARS)
            and _plain(candidate.supersedes, MAX_ID_CHARS)
            and _plain(candidate.restates, MAX_ID_CHARS)
            and pointer_problem(candidate.supersedes) is None
            and pointer_problem(candidate.restates) is None
            and (keywords is None or (
                len(keywords) <= MAX_KEYWORDS and len(set(keywords)) == len(keywords)
                and all(_plain(keyword, MAX_KEYWORD_CHARS) and keyword
                        and keyword == keyword.strip() for keyword in keywords))))


def fit_candidate(candidate: Candidate) -> Candidate:
    """The candidate as every store takes it: text cut to ``MAX_TEXT_CHARS`` at a word
    boundary, keywords fitted (``fit_keywords``), the thread key and run id cut to
    ``MAX_SOURCE_CHARS``, an empty or blank ``source_thread_key`` replaced by
    ``NO_THREAD_KEY``, a ``supersedes`` / ``restates`` that is no memory id dropped, lone
    surrogates replaced and NUL characters removed in every string (a text of nothing but
    NULs becomes U+FFFD, which the salience rule drops). A candidate that already fits is
    returned as it is (the same object)."""
    if _fits(candidate):
        return candidate
    whole = _clean(candidate.text) or "\ufffd"
    # A text of nothing but spaces would be cut to nothing: keep its first characters.
    text = cut_text(whole, MAX_TEXT_CHARS) or whole[:MAX_TEXT_CHARS]
    keywords = fit_keywords(candidate.keywords)
    thread_key = _source(candidate.source_thread_key)
    if not thread_key.strip():
        thread_key = NO_THREAD_KEY
    run_id = None if candidate.source_run_id is None else _source(candidate.source_run_id)
    fitted = attrs.evolve(
        candidate,
        text=text,
        keywords=keywords,
        source_thread_key=thread_key,
        source_run_id=run_id,
        supersedes=_pointer(candidate.supersedes),
        restates=_pointer(candidate.restates),
    )
    return candidate if fitted == candidate else fitted

