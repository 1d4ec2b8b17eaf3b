"""Records moved between stores: what an exported record looks like, and what an import takes.

An export is JSON Lines: one record a line, in the wire's own form (``records.to_wire``, the
one cattrs converter), so every field and every status round-trips. An import reads such a
line back (``parse_record_line``) or a wire object (``record_from_wire``, the worker's
/import), and refuses a record it could not keep as it is: one whose id is not
``mem:<its scopeKey>:<seq>`` (a record naming another scope than its own is refused, never
moved across), one beyond the caps every boundary shares, or text that is not Unicode. A
forgotten record is scrubbed (no text, no keywords) whatever the line says, so an import can
never give a forgotten record its text back.

An import's record is data from outside, not a store's own row, so it is bounded as no
store could have made it otherwise: given the importer's clock (``now``), a ``createdAt`` or
``lastUsedAt`` after ``now + MAX_CLOCK_SKEW_MS`` is refused (a time in the future would
rank the record as just used, and keep it from eviction, for as long as the future lasts),
and so is a ``useCount`` above ``MAX_USE_COUNT``. ``reflection_sourced`` is what a record
becomes when nobody vouches for its ``source``: only a person's own ``remember`` makes a
``human`` record, so only the operator's own import may keep one.

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
    Source,
    Status,
    WireError,
    from_wire,
    to_wire,
)
from scopemem.core.scopes import MEMORY_ID_PREFIX, pointer_problem, scope_key_problem
from scopemem.core.text import is_text

__all__ = ["MAX_CLOCK_SKEW_MS", "MAX_IMPORTED_SEQ", "MAX_USE_COUNT", "parse_record_line",
           "record_from_wire", "record_line", "record_problem", "record_seq_of",
           "reflection_sourced", "scrub"]

#: How far after the importer's clock an imported time may be: five minutes, for clocks of
#: two machines that disagree a little (an export from a worker whose clock runs ahead).
MAX_CLOCK_SKEW_MS = 5 * 60 * 1000
#: The most uses an imported record may claim: a use is a retrieval that returned the
#: record, and a billion is a record retrieved ten times a second for three years. A store
#: never reaches it; a forged count never goes past it.
MAX_USE_COUNT = 10**9
#: The highest id an import may give a record: every store then keeps at least as many ids
#: again for the scope's later writes (SQLite numbers a scope's records in 32 bits). At the
#: highest id a store holds, the scope would refuse every write for good, deleted or not
#: (ids are never reused); a scope that wrote a thousand records a day for a thousand years
#: would not reach this one.
MAX_IMPORTED_SEQ = 2**31 - 1


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


def record_problem(record: Record, now: int | None = None) -> str | None:
    """Why ``record`` cannot be imported as it is, in the wire's field names; None when it
    can. The checks every store and the worker share: the scope key's grammar, the id naming
    that scope with a canonical seq, the text and keyword caps, integers a JSON peer and
    SQLite both hold exactly, a use count within ``MAX_USE_COUNT``, and, given the
    importer's clock ``now``, no time after ``now + MAX_CLOCK_SKEW_MS``."""
    problem = scope_key_problem(record.scope_key)
    if problem is not None:
        return f"scopeKey {problem}"
    seq = record_seq_of(record)
    if seq is None:
        return (f"id {record.id!r} is not mem:{record.scope_key}:<n> (n from 1 to {MAX_SEQ},"
                " no leading zero): a record is imported into its own scope only")
    if seq > MAX_IMPORTED_SEQ:
        return (f"id {record.id!r}: an import numbers a scope's records up to"
                f" {MAX_IMPORTED_SEQ}, keeping ids for the scope's later writes")
    for name, value, most in (
            ("id", record.id, MAX_ID_CHARS), ("text", record.text, MAX_TEXT_CHARS),
            ("sourceThreadKey", record.source_thread_key, None),
            ("sourceRunId", record.source_run_id, None),
            ("supersedes", record.supersedes, MAX_ID_CHARS),
            ("restates", record.restates, MAX_ID_CHARS)):
        problem = _string_problem(name, value, most)
        if problem is not None:
            return problem
    for name, value in (("supersedes", record.supersedes), ("restates", record.restates)):
        problem = pointer_problem(value)
        if problem is not None:
            return f"{name} {problem}"
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
    if record.use_count > MAX_USE_COUNT:
        return f"useCount {record.use_count} is above {MAX_USE_COUNT}, more than a store counts"
    if now is not None:
        latest = now + MAX_CLOCK_SKEW_MS
        for name, when in (("createdAt", record.created_at),
                           ("lastUsedAt", record.last_used_at)):
            if when is not None and when > latest:
                return (f"{name} {when} is in the future (after now, {now}, plus"
                        f" {MAX_CLOCK_SKEW_MS // 60_000} minutes of clock skew)")
    return None


def scrub(record: Record) -> Record:
    """``record`` as a store keeps it: a forgotten record without its text and keywords, and a
    swept record whose text was scrubbed (past the retention) without keywords either."""
    if record.status is Status.FORGOTTEN and (record.text or record.keywords):
        return attrs.evolve(record, text="", keywords=())
    if record.status is Status.SWEPT and not record.text and record.keywords:
        return attrs.evolve(record, keywords=())
    return record


def reflection_sourced(record: Record) -> Record:
    """``record`` with the source of a record nobody vouches for: ``reflection``."""
    if record.source is Source.REFLECTION:
        return record
    return attrs.evolve(record, source=Source.REFLECTION)


def record_from_wire(item: Any, now: int | None = None) -> Record:
    """One exported record from its wire object, checked (``record_problem``, against the
    clock ``now`` when given) and scrubbed; ``WireError`` naming the field otherwise."""
    if not isinstance(item, Mapping):
        raise WireError("a record must be a JSON object")
    record = from_wire(item, Record)
    problem = record_problem(record, now)
    if problem is not None:
        raise WireError(problem)
    return scrub(record)


def record_line(record: Record) -> str:
    """One line of an export (no newline): the record's wire object, compact, UTF-8 text."""
    return json.dumps(to_wire(record), ensure_ascii=False, separators=(",", ":"))


def _refuse_constant(name: str) -> Any:
    raise WireError(f"not valid JSON ({name} is not a JSON value)")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def parse_record_line(line: str, now: int | None = None) -> Record:
    """The record of one export line (its times checked against ``now`` when given);
    ``WireError`` saying what is wrong with it."""
    try:
        value = _DECODER.decode(line)
    except WireError:
        raise
    except RecursionError:
        raise WireError("not valid JSON (nested too deeply)") from None
    except ValueError as exc:
        raise WireError(f"not valid JSON ({exc})") from None
    return record_from_wire(value, now)
