"""Scoring, the hard budget, and the rendered block.

score = 0.7 · keyword match + 0.3 · recency. Keyword match dominates; recency (exponential
decay with τ = 7 days over last use, else creation) breaks ties and lets stale records sink
without any sweeper.

The block is advisory context, never instructions: it opens with a line saying the memory may
be outdated, and every record field is sanitized so a poisoned record renders as exactly one
bullet line and can never forge the fence or another turn.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence

from scopemem.core.records import Record
from scopemem.core.text import estimate_tokens, sanitize_field, tokenize

KEYWORD_WEIGHT = 0.7
RECENCY_WEIGHT = 0.3
RECENCY_TAU_MS = 7 * 24 * 60 * 60 * 1000

FENCE_OPEN = "<background_memory>"
FENCE_CLOSE = "</background_memory>"


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
    ``last_touched``. ``score_record`` uses it; ``engine.rank_matched`` runs it unrolled,
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


def apply_budget(
    records: Sequence[Record], *, limit: int, max_tokens: int, reserved_tokens: int = 0
) -> list[Record]:
    """The longest prefix of ``records`` within ``limit`` records and ``max_tokens``.

    Each record costs its rendered bullet (escaped text plus provenance), so the escape
    overhead is counted and the estimate bounds the injected size. The first record is always
    kept, so one large record is never silently dropped. Order is kept."""
    kept: list[Record] = []
    used = reserved_tokens
    for record in records:
        if len(kept) >= limit:
            break
        cost = estimate_tokens(render_bullet(record) + "\n")
        if kept and used + cost > max_tokens:
            break
        kept.append(record)
        used += cost
    return kept


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
