"""Records moved between stores: what an exported record looks like, and what an import takes.

An export is JSON Lines: one record a line, in the wire's own form (``records.to_wire``, the
one cattrs converter), so every field and every status round-trips. An import reads such a
line back (``parse_record_line``) or a wire object (``record_from_wire``, the worker's
/import), and refuses a record it could not keep as it is: one whose id is not
``mem:<its scopeKey>:<seq>`` (a record naming another scope than its own is refused, never
moved across), one beyond the caps every boundary shares, or text that is not Unicode. A
forgotten record is scrubbed (no text, no keywords) whatever the line says, so an import can
never give a forgotten record its text back.

Pure: no I/O, nothing of the project outside ``core``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from scopemem.core.records import (
    MAX_ID_CHARS,
    MAX_IMPORT_INT,
    MAX_KEYWORD_CHARS,
    MAX_KEYWORDS,
    MAX_SEQ,
    MAX_TEXT_CHARS,
    Record,
    Status,
    WireError,
    from_wire,
    to_wire,
)
from scopemem.core.scopes import MEMORY_ID_PREFIX, scope_key_problem
from scopemem.core.text import is_text

__all__ = ["parse_record_line", "record_from_wire", "record_line", "record_problem",
           "record_seq_of", "scrub"]


def record_seq_of(record: Record) -> int | None:
    """The seq of ``record``'s id when the id is the canonical ``mem:<scopeKey>:<seq>`` of
    its own scope (no leading zero, 1 to ``MAX_SEQ``); None otherwise."""
    prefix = f"{MEMORY_ID_PREFIX}{record.scope_key}:"
    record_id = record.id
    if not record_id.startswith(prefix):
        return None
    digits = record_id[len(prefix):]
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 18:
        return None
    seq = int(digits)
    if not 1 <= seq <= MAX_SEQ or str(seq) != digits:
        return None
    return seq


def _string_problem(name: str, value: str | None, max_chars: int | None) -> str | None:
    if value is None:
        return None
    if not is_text(value):
        return f"{name} is not valid Unicode text (it holds a lone surrogate)"
    if max_chars is not None and len(value) > max_chars:
        return f"{name} must be at most {max_chars} characters"
    return None


def record_problem(record: Record) -> str | None:
    """Why ``record`` cannot be imported as it is, in the wire's field names; None when it
    can. The checks every store and the worker share: the scope key's grammar, the id naming
    that scope with a canonical seq, the text and keyword caps, integers a JSON peer and
    SQLite both hold exactly."""
    problem = scope_key_problem(record.scope_key)
    if problem is not None:
        return f"scopeKey {problem}"
    if record_seq_of(record) is None:
        return (f"id {record.id!r} is not mem:{record.scope_key}:<n> (n from 1 to {MAX_SEQ},"
                " no leading zero): a record is imported into its own scope only")
    for name, value, most in (
            ("id", record.id, MAX_ID_CHARS), ("text", record.text, MAX_TEXT_CHARS),
            ("sourceThreadKey", record.source_thread_key, None),
            ("sourceRunId", record.source_run_id, None),
            ("supersedes", record.supersedes, MAX_ID_CHARS),
            ("restates", record.restates, MAX_ID_CHARS)):
        problem = _string_problem(name, value, most)
        if problem is not None:
            return problem
    if len(record.keywords) > MAX_KEYWORDS:
        return f"keywords must hold at most {MAX_KEYWORDS} keywords"
    for n, keyword in enumerate(record.keywords):
        problem = _string_problem(f"keywords[{n}]", keyword, MAX_KEYWORD_CHARS)
        if problem is not None:
            return problem
    for name, number in (("createdAt", record.created_at), ("lastUsedAt", record.last_used_at),
                         ("useCount", record.use_count)):
        if number is not None and number > MAX_IMPORT_INT:
            return f"{name} must be at most {MAX_IMPORT_INT}"
    return None


def scrub(record: Record) -> Record:
    """``record`` as a store keeps it: a forgotten record without its text and keywords, and a
    swept record whose text was scrubbed (past the retention) without keywords either."""
    if record.status is Status.FORGOTTEN and (record.text or record.keywords):
        return attrs.evolve(record, text="", keywords=())
    if record.status is Status.SWEPT and not record.text and record.keywords:
        return attrs.evolve(record, keywords=())
    return record


def record_from_wire(item: Any) -> Record:
    """One exported record from its wire object, checked (``record_problem``) and scrubbed;
    ``WireError`` naming the field otherwise."""
    if not isinstance(item, Mapping):
        raise WireError("a record must be a JSON object")
    record = from_wire(item, Record)
    problem = record_problem(record)
    if problem is not None:
        raise WireError(problem)
    return scrub(record)


def record_line(record: Record) -> str:
    """One line of an export (no newline): the record's wire object, compact, UTF-8 text."""
    return json.dumps(to_wire(record), ensure_ascii=False, separators=(",", ":"))


def _refuse_constant(name: str) -> Any:
    raise WireError(f"not valid JSON ({name} is not a JSON value)")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def parse_record_line(line: str) -> Record:
    """The record of one export line; ``WireError`` saying what is wrong with it."""
    try:
        value = _DECODER.decode(line)
    except WireError:
        raise
    except RecursionError:
        raise WireError("not valid JSON (nested too deeply)") from None
    except ValueError as exc:
        raise WireError(f"not valid JSON ({exc})") from None
    return record_from_wire(value)
