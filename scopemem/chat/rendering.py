"""How the replies of the memory commands show records, ids and what someone typed, within
a reply's budget: the pieces ``chat.commands`` and the MCP tools render with. Every value is
rendered as the prompt block renders a record's text (``sanitize_field``)."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from scopemem.api.results import ListResult
from scopemem.core.records import Record
from scopemem.core.text import format_utc, sanitize_field


def _date(ms: int) -> str:
    return format_utc(ms, "%Y-%m-%d")


def code(value: str, markdown: bool = True) -> str:
    """An id or key as a reply shows it (sanitized: it may hold what a person typed): in a
    code span for chat and agents, plain for a terminal, where a backtick is no markup."""
    shown = sanitize_field(value)
    return f"`{shown}`" if markdown else shown


def record_line(record: Record, markdown: bool = True) -> str:
    # Sanitized: one line per record whatever the text holds, and nothing that a chat
    # platform or a model could read as markup or a new turn, under any Unicode
    # normalisation, nor any character a person reading the reply cannot see. The id is a
    # store's, but it is rendered from the record all the same.
    return (f"{code(record.id, markdown)} {record.kind.value} {_date(record.created_at)} — "
            f"{sanitize_field(record.text)} (source "
            f"{code(record.source_thread_key, markdown)})")


#: The most characters of record text one reply of a chat or an agent carries (a listing,
#: a search): a chat platform cuts or refuses a long message (Slack at 40,000 characters),
#: and Claude Code refuses a tool's answer over 25,000 tokens by default. Fifty records of
#: 4,000 characters in each of four scopes would be 800,000.
MAX_REPLY_TEXT_CHARS = 20_000
#: The most characters of what someone typed (a query) a reply repeats back to them.
MAX_ECHO_CHARS = 200


def echoed(value: str) -> str:
    """What someone typed, as a reply repeats it: rendered as a record's text, and cut to
    ``MAX_ECHO_CHARS`` (a pasted log as a query is no reply of 100,000 characters)."""
    shown = sanitize_field(value)
    return shown if len(shown) <= MAX_ECHO_CHARS else shown[:MAX_ECHO_CHARS].rstrip() + " …"


def fitting(records: Sequence[Record], budget: int = MAX_REPLY_TEXT_CHARS) -> int:
    """How many of ``records``, in order, fit ``budget`` characters of text (the first
    always does: one record is at most 4,000)."""
    used = 0
    for count, record in enumerate(records):
        used += len(record.text)
        if used > budget and count:
            return count
    return len(records)


def within_budget(result: ListResult, budget: int = MAX_REPLY_TEXT_CHARS
                  ) -> tuple[ListResult, int]:
    """``result`` with its scopes' records cut to ``budget`` characters of record text in
    all, the first scopes first, and how many records that left out."""
    kept = []
    for section in result.sections:
        count = fitting(section.records, budget) if budget > 0 else 0
        budget -= sum(len(record.text) for record in section.records[:count])
        kept.append(attrs.evolve(section, records=section.records[:count]))
    left = sum(len(s.records) for s in result.sections) - sum(len(s.records) for s in kept)
    return attrs.evolve(result, sections=tuple(kept)), left


def not_shown_note(count: int) -> str:
    return (f"({count} more not shown: a reply holds at most {MAX_REPLY_TEXT_CHARS:,}"
            " characters of record text; lower the limit or add words to narrow it)")
