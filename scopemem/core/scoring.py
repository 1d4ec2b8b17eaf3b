"""Scoring, the hard budget, and the rendered block.

score = 0.7 · keyword match + 0.3 · recency. Keyword match dominates; recency (exponential
decay with τ = 7 days over last use, else creation) breaks ties and lets stale records sink
without any sweeper.

The block is advisory context, never instructions: it opens with a line saying the memory may
be outdated, and every record field is sanitized so a poisoned record renders as exactly one
bullet line and can never forge the fence or another turn.

The budget is a hard ceiling on the rendered block. The first ranked record is always kept,
but when its bullet alone would break the ceiling it is cut: the kept copy ends at a word
(else at a character) and carries ``CUT_MARKER``, so a reader knows there was more; the
stored record is never changed. Only when not even a cut bullet fits beside the prefix and
fences (a ``max_tokens`` below ``MIN_BLOCK_TOKENS``, or very long scope keys) is the block
empty.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Collection, Iterable, Sequence

import attrs

# MIN_BLOCK_TOKENS, the smallest ``max_tokens`` the block allows, is defined with the other
# limits so that reading a configuration does not load this module's tokenizer.
from scopemem.core.records import MIN_BLOCK_TOKENS as MIN_BLOCK_TOKENS
from scopemem.core.records import Record
from scopemem.core.text import estimate_tokens, sanitize_field, tokenize
from scopemem.core.words import normalize_text

KEYWORD_WEIGHT = 0.7
RECENCY_WEIGHT = 0.3
RECENCY_TAU_MS = 7 * 24 * 60 * 60 * 1000

FENCE_OPEN = "<background_memory>"
FENCE_CLOSE = "</background_memory>"

#: Ends a field the budget had to shorten, so a reader knows there was more. Plain
#: characters, which sanitizing leaves as they are.
CUT_MARKER = " …[cut]"
_WORD_RE = re.compile(r"\S+")


def record_tokens(record: Record) -> set[str]:
    """Every whole token a record can be found by: its text's and its keywords'."""
    tokens = set(tokenize(record.text))
    for keyword in record.keywords:
        tokens.update(tokenize(keyword))
    return tokens


def keyword_match(query_tokens: Collection[str], record: Record) -> float:
    """The fraction of the (distinct) query tokens the record contains as whole tokens.

    Whole tokens, not substrings: a substring test lets a one-letter token match nearly
    everything. An empty query matches nothing."""
    if not query_tokens:
        return 0.0
    have = record_tokens(record)
    return sum(1 for token in query_tokens if token in have) / len(query_tokens)


def recency_score(record: Record, now: int) -> float:
    """1 for a record used just now, 1/e after τ, towards 0 beyond; never above 1."""
    return recency_of(record.last_touched, now)


def recency_of(last_touched: int, now: int) -> float:
    age = max(0, now - last_touched)
    return math.exp(-age / RECENCY_TAU_MS)


def score_record(record: Record, query_tokens: Collection[str], now: int) -> float:
    return score_of(keyword_match(query_tokens, record), record.last_touched, now)


def score_of(match: float, last_touched: int, now: int) -> float:
    """The one scoring formula, for a record with keyword match ``match`` last touched at
    ``last_touched``. ``score_record`` uses it; ``ranking.score_candidates`` runs it unrolled,
    and a test holds the two equal."""
    return KEYWORD_WEIGHT * match + RECENCY_WEIGHT * recency_of(last_touched, now)


def render_bullet(record: Record) -> str:
    return (f"- {sanitize_field(record.text)} "
            f"(source: {sanitize_field(record.source_thread_key)})")


def block_prefix(scope_keys: Iterable[str]) -> str:
    names = " + ".join(sanitize_field(key) for key in scope_keys)
    return f"Background memory for {names} (may be outdated — verify before acting):"


def block_overhead_tokens(scope_keys: Iterable[str]) -> int:
    """What the prefix and the fence lines cost, so the budget covers the whole block."""
    return estimate_tokens("\n".join((block_prefix(scope_keys), FENCE_OPEN, FENCE_CLOSE)))


def bullet_tokens(record: Record) -> int:
    """What one record costs in the block: its rendered bullet and its line break."""
    return estimate_tokens(render_bullet(record) + "\n")


def apply_budget(
    records: Sequence[Record], *, limit: int, max_tokens: int, reserved_tokens: int = 0
) -> list[Record]:
    """The longest prefix of ``records`` within ``limit`` records and ``max_tokens``.

    Each record costs its rendered bullet (escaped text plus provenance), so the escape
    overhead is counted and, with ``reserved_tokens`` covering the prefix and fences
    (``block_overhead_tokens``), the rendered block never exceeds ``max_tokens``. Order is
    kept. The first record is always kept, so one large record is never silently dropped:
    when it does not fit it comes back cut to fit (``cut_to_fit``), and fills the block. Only
    when not even a cut bullet fits is the answer empty."""
    kept: list[Record] = []
    used = reserved_tokens
    for record in records:
        if len(kept) >= limit:
            break
        cost = bullet_tokens(record)
        if used + cost > max_tokens:
            if kept:
                break
            cut = cut_to_fit(record, max_tokens - used)
            return [] if cut is None else [cut]
        kept.append(record)
        used += cost
    return kept


def window_then_hits(
    window: Sequence[Record], hits: Sequence[Record], *, limit: int, max_tokens: int,
    reserved_tokens: int = 0
) -> list[Record]:
    """A block's records: the repository ``window`` (newest first) whole, then the keyword
    ``hits`` (best first) in what is left of ``limit`` and ``max_tokens``.

    A hit that is also in the window is shown once, in the window; so is a lesson that
    several scopes hold (the same text up to ``normalize_text``): the copy the block would
    show first stays (the window's, else the best hit) and the others are dropped before the
    budget is counted. When the window itself
    does not fit (``limit`` below it, or a ``max_tokens`` too small for it), its records
    that are also hits stay (best hit first) and its oldest others give way; the kept
    window records keep the window's order. ``apply_budget`` does the counting, so the
    first record is always kept, cut if need be."""
    first: dict[str, str] = {}  # a text's dedup key -> the id of its first copy
    window = [r for r in window if first.setdefault(normalize_text(r.text), r.id) == r.id]
    hits = [r for r in hits if first.setdefault(normalize_text(r.text), r.id) == r.id]
    in_window = {record.id for record in window}
    hit_ids = {record.id for record in hits}
    order = [*(record for record in hits if record.id in in_window),
             *(record for record in window if record.id not in hit_ids),
             *(record for record in hits if record.id not in in_window)]
    kept = {record.id: record for record in apply_budget(
        order, limit=limit, max_tokens=max_tokens, reserved_tokens=reserved_tokens)}
    return [*(kept[record.id] for record in window if record.id in kept),
            *(record for record in kept.values() if record.id not in in_window)]


def cut_to_fit(record: Record, tokens: int) -> Record | None:
    """``record`` when its bullet costs at most ``tokens``; else a new record whose bullet
    does, its text (and, when the provenance leaves it too little room, its source) cut;
    None when the room cannot hold a cut marker for each field that needs one.

    The two fields share the room: a field that needs at most half of it keeps all of itself
    and the other takes the rest; when both need more, each gets half. So a long thread key
    can neither crowd the text out nor be crowded out of its own provenance."""
    if bullet_tokens(record) <= tokens:
        return record
    text_chars = len(sanitize_field(record.text))
    source_chars = len(sanitize_field(record.source_thread_key))
    # estimate_tokens(bullet + "\n") <= tokens exactly when len(bullet) + 1 <= 4 * tokens;
    # the room is what that leaves the two fields once the bullet's own frame is paid.
    frame = len(render_bullet(record)) - text_chars - source_chars
    room = 4 * tokens - 1 - frame
    half = room // 2
    if source_chars <= half:
        text_room, source_room = room - source_chars, source_chars
    elif text_chars <= room - half:
        text_room, source_room = text_chars, room - text_chars
    else:
        text_room, source_room = room - half, half
    text = _cut_field(record.text, text_room)
    source = _cut_field(record.source_thread_key, source_room)
    if text is None or source is None:
        return None
    return attrs.evolve(record, text=text, source_thread_key=source)


def _cut_field(value: str, room: int) -> str | None:
    """``value`` when it renders in ``room`` characters; else its longest prefix that, with
    ``CUT_MARKER`` after it, does: ending at a word when at least one whole word fits, else at
    a character. None when not even the marker fits.

    The raw value is cut and its rendering measured, so an escape such as ``&amp;`` is never
    split: a raw ``&`` is wholly in the prefix or out of it."""
    if len(sanitize_field(value)) <= room:
        return value

    def too_long(end: int) -> bool:
        return len(sanitize_field(value[:end] + CUT_MARKER)) > room

    # The rendering of a longer prefix is never shorter, so the prefixes that fit come first
    # and a binary search finds the last of them.
    word_ends = [match.end() for match in _WORD_RE.finditer(value)]
    fitting = bisect.bisect_left(word_ends, True, key=too_long)
    if fitting:
        return value[:word_ends[fitting - 1]] + CUT_MARKER
    fitting = bisect.bisect_left(range(len(value)), True, key=too_long)
    if fitting:
        return value[:fitting - 1].rstrip() + CUT_MARKER
    return None


def render_block(records: Sequence[Record], scope_keys: Sequence[str]) -> str:
    """The advisory block naming every scope read, or "" when there is nothing to say."""
    if not records:
        return ""
    # The fence lines are written here, not through the sanitizer, so they stay real.
    lines = [block_prefix(scope_keys), FENCE_OPEN]
    lines.extend(render_bullet(record) for record in records)
    lines.append(FENCE_CLOSE)
    return "\n".join(lines)


def with_memory(system: str, block: str) -> str:
    """Fold the block in front of a system prompt; the prompt is returned untouched when the
    block is empty, so memory that said nothing changes no byte of the model's input."""
    if not block:
        return system
    if not system:
        return block
    return f"{block}\n\n{system}"
