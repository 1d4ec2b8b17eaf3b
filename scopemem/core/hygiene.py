"""Write hygiene: what a candidate is made into before any store sees it.

Candidates come from several producers: the extractor (through reflection), a person's
``remember``, an integrator calling a store directly. Whatever the producer, a candidate must
fit the record contract that the wire spells out (``MAX_TEXT_CHARS``, ``MAX_KEYWORDS``,
``MAX_KEYWORD_CHARS``, a non-empty ``sourceThreadKey``, text that encodes as UTF-8), because
a store may be a remote worker that refuses a whole batch for one field over a cap, and one
bad candidate must never cost the others of its batch.

* :func:`fit_candidate` trims and drops what does not fit, from the same caps the worker's
  validator checks. Every store applies it at its write boundary, so a candidate lands the
  same way on every store, and the worker client applies it before anything leaves the
  process.

Redaction, which comes before fitting, is ``scopemem.secrets.redact_candidate`` (its rules
are a library's data); ``stores.base.fit_batch`` applies both.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re

import attrs

from scopemem.core.records import MAX_KEYWORD_CHARS, MAX_KEYWORDS, MAX_TEXT_CHARS, Candidate
from scopemem.core.text import distinct_tokens, encodable

__all__ = ["NO_THREAD_KEY", "cut_text", "fit_candidate", "fit_keywords"]

#: The provenance a candidate carries when its producer knew no thread (the wire needs one).
NO_THREAD_KEY = "unthreaded"

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
        keyword = encodable(keyword).strip()
        if not keyword:
            continue
        if len(keyword) <= MAX_KEYWORD_CHARS:
            kept.setdefault(keyword, None)
            continue
        for token in distinct_tokens(keyword):
            if len(token) <= MAX_KEYWORD_CHARS:
                kept.setdefault(token, None)
    return tuple(list(kept)[:MAX_KEYWORDS])


def _optional(value: str | None) -> str | None:
    return None if value is None else encodable(value)


def _fits(candidate: Candidate) -> bool:
    """The common case, decided cheaply (every store's write path asks it of every
    candidate): ASCII strings within the caps, a thread key, keywords that need no change."""
    keywords = candidate.keywords
    return (len(candidate.text) <= MAX_TEXT_CHARS and candidate.text.isascii()
            and candidate.source_thread_key.isascii() and bool(candidate.source_thread_key.strip())
            and (candidate.source_run_id is None or candidate.source_run_id.isascii())
            and (candidate.supersedes is None or candidate.supersedes.isascii())
            and (candidate.restates is None or candidate.restates.isascii())
            and (keywords is None or (
                len(keywords) <= MAX_KEYWORDS and len(set(keywords)) == len(keywords)
                and all(keyword.isascii() and 0 < len(keyword) <= MAX_KEYWORD_CHARS
                        and keyword == keyword.strip() for keyword in keywords))))


def fit_candidate(candidate: Candidate) -> Candidate:
    """The candidate as every store takes it: text cut to ``MAX_TEXT_CHARS`` at a word
    boundary, keywords fitted (``fit_keywords``), an empty or blank ``source_thread_key``
    replaced by ``NO_THREAD_KEY``, lone surrogates replaced in every string. A candidate
    that already fits is returned as it is (the same object)."""
    if _fits(candidate):
        return candidate
    whole = encodable(candidate.text)
    # A text of nothing but spaces would be cut to nothing: keep its first characters.
    text = cut_text(whole, MAX_TEXT_CHARS) or whole[:MAX_TEXT_CHARS]
    keywords = fit_keywords(candidate.keywords)
    thread_key = encodable(candidate.source_thread_key)
    if not thread_key.strip():
        thread_key = NO_THREAD_KEY
    fitted = attrs.evolve(
        candidate,
        text=text,
        keywords=keywords,
        source_thread_key=thread_key,
        source_run_id=_optional(candidate.source_run_id),
        supersedes=_optional(candidate.supersedes),
        restates=_optional(candidate.restates),
    )
    return candidate if fitted == candidate else fitted

