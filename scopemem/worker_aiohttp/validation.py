"""Request bodies of the Memory Worker's data routes: parsed, checked, or refused with a reason.

Every function here is pure: bytes or a decoded JSON object in, a small frozen value out, or a
``BodyError`` whose message names the offending field in the wire's own spelling (``scopeKey``,
``records[2].text``) so a client's author can fix the call from the 400 alone. Keys this module
does not know are ignored, so a newer client's extra fields never break an older server.

Candidates are built by the one wire converter (``scopemem.core.records.from_wire``) once their
fields have passed the checks below, which add the size limits the converter does not know.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, TypeGuard

import attrs

from scopemem.core.counters import MAX_DAY, MAX_DELTA, counter_name_problem
from scopemem.core.porting import record_from_wire
from scopemem.core.records import (
    MAX_BATCH,
    MAX_COUNT_ROWS,
    MAX_EXPORT_PAGE,
    MAX_ID_CHARS,
    MAX_IMPORT_BATCH,
    MAX_IMPORT_INT,
    MAX_KEYWORD_CHARS,
    MAX_KEYWORDS,
    MAX_LIMIT,
    MAX_QUERY_CHARS,
    MAX_SCOPE_CAP,
    MAX_SCOPES_PAGE,
    MAX_SEQ,
    MAX_SOURCE_CHARS,
    MAX_STATS_SCOPES,
    MAX_TEXT_CHARS,
    MAX_USED_IDS,
    MAX_USED_SCOPES,
    Candidate,
    CountRow,
    Kind,
    Record,
    Source,
    WireError,
    from_wire,
)
from scopemem.core.scopes import MAX_SCOPE_KEY_CHARS, identifier_problem, scope_key_problem
from scopemem.core.text import is_text

KINDS = tuple(kind.value for kind in Kind)
SOURCES = tuple(source.value for source in Source)


class BodyError(ValueError):
    """A request body the worker refuses; ``str(error)`` is the reason sent back with a 400."""


@attrs.frozen
class RetrieveArgs:
    scope_key: str
    query: str
    limit: int
    bump: bool = True


@attrs.frozen
class UsedArgs:
    used: dict[str, tuple[str, ...]]


@attrs.frozen
class WriteArgs:
    scope_key: str
    candidates: tuple[Candidate, ...]
    cap: int | None


@attrs.frozen
class ListArgs:
    scope_key: str
    limit: int
    query: str | None
    kind: Kind | None


@attrs.frozen
class ForgetArgs:
    scope_key: str
    record_id: str


@attrs.frozen
class SweepArgs:
    scope_key: str
    dry_run: bool


# --- the body as a whole ------------------------------------------------------------------------


def _refuse_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON does not, and neither do we.
    raise BodyError(f"body is not valid JSON ({name} is not a JSON value)")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def parse_body(raw: bytes) -> dict[str, Any]:
    """The decoded JSON object of a request body."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BodyError("body is not valid JSON (not UTF-8)") from None
    if text.startswith("\ufeff"):
        raise BodyError("body is not valid JSON (it starts with a byte order mark)")
    try:
        value = _DECODER.decode(text)
    except BodyError:
        raise
    except RecursionError:
        raise BodyError("body is not valid JSON (nested too deeply)") from None
    except ValueError as exc:  # JSONDecodeError, and int() refusing a huge literal
        raise BodyError(f"body is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise BodyError("body must be a JSON object")
    problem = _unencodable(value, "")
    if problem is not None:
        where, what = problem
        raise BodyError(f"{where} {what}")
    return value


_SURROGATE = "is not valid Unicode text (it holds a lone surrogate)"
_NUL = "holds a NUL character (U+0000), which no store keeps"


def _string_problem(value: str) -> str | None:
    if "\x00" in value:
        return _NUL
    return None if value.isascii() or is_text(value) else _SURROGATE


def _unencodable(value: Any, where: str) -> tuple[str, str] | None:
    """The path of the first string in a decoded body (a key or a value) no store can
    keep, and why: one that cannot be encoded as UTF-8 (JSON's ``\\ud800`` escapes decode
    to lone surrogates, which no answer can carry either), or one holding a NUL character
    (PostgreSQL refuses it; every store must answer alike). None when every string is
    text."""
    if isinstance(value, str):
        problem = _string_problem(value)
        return None if problem is None else (where or "body", problem)
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            problem = _string_problem(key)
            if problem is not None:
                return where or "body", f"has a key that {problem}"
            found = _unencodable(item, path)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _unencodable(item, f"{where}[{index}]")
            if found is not None:
                return found
    return None


# --- single fields ------------------------------------------------------------------------------


def _scope_key(body: Mapping[str, Any], where: str = "scopeKey") -> str:
    if "scopeKey" not in body:
        raise BodyError(f"{where} is required")
    value = body["scopeKey"]
    problem = scope_key_problem(value)
    if problem is not None or not isinstance(value, str):
        raise BodyError(f"{where} {problem or 'must be a string'}")
    return value


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _bounded_int(body: Mapping[str, Any], field: str, low: int, high: int) -> int:
    value = body[field]
    if not _is_int(value) or not low <= value <= high:
        raise BodyError(f"{field} must be an integer from {low} to {high}")
    return value


def _limit(body: Mapping[str, Any]) -> int:
    if "limit" not in body:
        raise BodyError("limit is required")
    return _bounded_int(body, "limit", 1, MAX_LIMIT)


def _query(value: Any) -> str:
    if not isinstance(value, str):
        raise BodyError("query must be a string")
    if len(value) > MAX_QUERY_CHARS:
        raise BodyError(f"query must be at most {MAX_QUERY_CHARS} characters")
    return value


def _kind(value: Any, field: str) -> Kind:
    if not isinstance(value, str) or value not in KINDS:
        raise BodyError(f"{field} must be one of: {', '.join(KINDS)}")
    return Kind(value)


# --- candidates ---------------------------------------------------------------------------------


def _non_empty_string(item: Mapping[str, Any], field: str, where: str, *, max_chars: int | None
                      ) -> None:
    value = item.get(field)
    if not isinstance(value, str) or not value:
        raise BodyError(f"{where}.{field} must be a non-empty string")
    if max_chars is not None and len(value) > max_chars:
        raise BodyError(f"{where}.{field} must be at most {max_chars} characters")


def _optional_string(item: Mapping[str, Any], field: str, where: str, *, max_chars: int
                     ) -> None:
    if field in item and not isinstance(item[field], str):
        raise BodyError(f"{where}.{field} must be a string")
    if field in item and len(item[field]) > max_chars:
        raise BodyError(f"{where}.{field} must be at most {max_chars} characters")


def _check_keywords(item: Mapping[str, Any], where: str) -> None:
    if "keywords" not in item:
        return
    keywords = item["keywords"]
    if not isinstance(keywords, list):
        raise BodyError(f"{where}.keywords must be a list of strings")
    if len(keywords) > MAX_KEYWORDS:
        raise BodyError(f"{where}.keywords must hold at most {MAX_KEYWORDS} keywords")
    for n, keyword in enumerate(keywords):
        if not isinstance(keyword, str) or len(keyword) > MAX_KEYWORD_CHARS:
            raise BodyError(
                f"{where}.keywords[{n}] must be a string of at most {MAX_KEYWORD_CHARS} characters"
            )


def _check_confidence(item: Mapping[str, Any], where: str) -> None:
    if "confidence" not in item:
        return
    value = item["confidence"]
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or math.isnan(value) or not 0 <= value <= 1):
        raise BodyError(f"{where}.confidence must be a number from 0 to 1")


def parse_candidate(item: Any, where: str) -> Candidate:
    """One element of ``records``; ``where`` is its path (``records[3]``) for the reason."""
    if not isinstance(item, dict):
        raise BodyError(f"{where} must be an object")
    if "kind" not in item:
        raise BodyError(f"{where}.kind is required")
    _kind(item["kind"], f"{where}.kind")
    _non_empty_string(item, "text", where, max_chars=MAX_TEXT_CHARS)
    _non_empty_string(item, "sourceThreadKey", where, max_chars=MAX_SOURCE_CHARS)
    _check_keywords(item, where)
    _optional_string(item, "sourceRunId", where, max_chars=MAX_SOURCE_CHARS)
    _check_confidence(item, where)
    _optional_string(item, "supersedes", where, max_chars=MAX_ID_CHARS)
    _optional_string(item, "restates", where, max_chars=MAX_ID_CHARS)
    if "source" in item and item["source"] not in SOURCES:
        raise BodyError(f"{where}.source must be one of: {', '.join(SOURCES)}")
    try:
        return from_wire(item, Candidate)
    except WireError as exc:  # the checks above should leave nothing for it to find
        raise BodyError(f"{where}: {exc}") from None


def _required_list(body: Mapping[str, Any], field: str, most: int, what: str) -> list[Any]:
    if field not in body:
        raise BodyError(f"{field} is required")
    value = body[field]
    if not isinstance(value, list):
        raise BodyError(f"{field} must be a list")
    if len(value) > most:
        raise BodyError(f"{field} must hold at most {most} {what}")
    return value


def _candidates(body: Mapping[str, Any]) -> tuple[Candidate, ...]:
    records = _required_list(body, "records", MAX_BATCH, "candidates")
    return tuple(parse_candidate(item, f"records[{n}]") for n, item in enumerate(records))


# --- one function per route --------------------------------------------------------------------


def retrieve_args(body: Mapping[str, Any]) -> RetrieveArgs:
    scope_key = _scope_key(body)
    if "query" not in body:
        raise BodyError("query is required")
    bump = body.get("bump", True)
    if not isinstance(bump, bool):
        raise BodyError("bump must be a boolean")
    return RetrieveArgs(scope_key, _query(body["query"]), _limit(body), bump)


def used_args(body: Mapping[str, Any]) -> UsedArgs:
    """``{"used": [{"scopeKey": …, "ids": [id, …]}, …]}``: the records a client showed."""
    items = _required_list(body, "used", MAX_USED_SCOPES, "scopes")
    used: dict[str, list[str]] = {}
    total = 0
    for n, item in enumerate(items):
        if not isinstance(item, dict):
            raise BodyError(f"used[{n}] must be an object")
        scope_key = _scope_key(item, f"used[{n}].scopeKey")
        ids = item.get("ids")
        if not isinstance(ids, list):
            raise BodyError(f"used[{n}].ids must be a list")
        total += len(ids)
        if total > MAX_USED_IDS:
            raise BodyError(f"used must hold at most {MAX_USED_IDS} ids in all")
        for m, record_id in enumerate(ids):
            problem = identifier_problem(record_id, max_chars=MAX_ID_CHARS)
            if problem is not None:
                raise BodyError(f"used[{n}].ids[{m}] {problem}")
        used.setdefault(scope_key, []).extend(ids)
    return UsedArgs({key: tuple(ids) for key, ids in used.items()})


def write_args(body: Mapping[str, Any]) -> WriteArgs:
    scope_key = _scope_key(body)
    candidates = _candidates(body)
    cap = _bounded_int(body, "cap", 1, MAX_SCOPE_CAP) if "cap" in body else None
    return WriteArgs(scope_key, candidates, cap)


def list_args(body: Mapping[str, Any]) -> ListArgs:
    scope_key = _scope_key(body)
    limit = _limit(body)
    query = _query(body["query"]) if "query" in body else None
    kind = _kind(body["kind"], "kind") if "kind" in body else None
    return ListArgs(scope_key, limit, query, kind)


def forget_args(body: Mapping[str, Any]) -> ForgetArgs:
    scope_key = _scope_key(body)
    if "id" not in body:
        raise BodyError("id is required")
    problem = identifier_problem(body["id"], max_chars=MAX_ID_CHARS)
    if problem is not None:
        raise BodyError(f"id {problem}")
    return ForgetArgs(scope_key, body["id"])


def sweep_args(body: Mapping[str, Any]) -> SweepArgs:
    scope_key = _scope_key(body)
    dry_run = body.get("dryRun", False)
    if not isinstance(dry_run, bool):
        raise BodyError("dryRun must be a boolean")
    return SweepArgs(scope_key, dry_run)


# --- moving records: /scopes, /export, /import --------------------------------------------------


@attrs.frozen
class ScopesArgs:
    after: str | None
    limit: int


@attrs.frozen
class ExportArgs:
    scope_key: str
    after: int
    limit: int


@attrs.frozen
class ImportArgs:
    records: tuple[Record, ...]


def scopes_args(body: Mapping[str, Any]) -> ScopesArgs:
    """``{after?, limit}``: the scope keys sorted after ``after``, at most ``limit``."""
    after = None
    if "after" in body:
        after = body["after"]
        problem = scope_key_problem(after)
        if problem is not None:
            raise BodyError(f"after {problem}")
    if "limit" not in body:
        raise BodyError("limit is required")
    return ScopesArgs(after, _bounded_int(body, "limit", 1, MAX_SCOPES_PAGE))


def export_args(body: Mapping[str, Any]) -> ExportArgs:
    """``{scopeKey, after?, limit}``: the scope's records with a seq above ``after``."""
    scope_key = _scope_key(body)
    after = _bounded_int(body, "after", 0, MAX_SEQ) if "after" in body else 0
    if "limit" not in body:
        raise BodyError("limit is required")
    return ExportArgs(scope_key, after, _bounded_int(body, "limit", 1, MAX_EXPORT_PAGE))


def import_args(body: Mapping[str, Any]) -> ImportArgs:
    """``{records: [Record, …]}``, each an exported record (``core.porting``)."""
    items = _required_list(body, "records", MAX_IMPORT_BATCH, "records")
    records = []
    for n, item in enumerate(items):
        try:
            records.append(record_from_wire(item))
        except WireError as exc:
            raise BodyError(f"records[{n}]: {exc}") from None
    return ImportArgs(tuple(records))


# --- counters: /counts, /stats ------------------------------------------------------------------

@attrs.frozen
class CountsArgs:
    rows: tuple[CountRow, ...]


@attrs.frozen
class StatsArgs:
    scope_keys: tuple[str, ...] | None
    prefix: str | None
    since: int


def counts_args(body: Mapping[str, Any]) -> CountsArgs:
    """``{counts: [{scopeKey, day, name, value}, …]}``: what the client's host counted
    (``day`` in UTC days since the epoch). Only the names ``core.counters`` knows pass, so
    a client cannot invent counters; the store adds every row or none."""
    items = _required_list(body, "counts", MAX_COUNT_ROWS, "rows")
    rows = []
    for n, item in enumerate(items):
        where = f"counts[{n}]"
        if not isinstance(item, dict):
            raise BodyError(f"{where} must be an object")
        scope_key = _scope_key(item, f"{where}.scopeKey")
        for field, low, high in (("day", 0, MAX_DAY), ("value", 1, MAX_DELTA)):
            if field not in item:
                raise BodyError(f"{where}.{field} is required")
            if not _is_int(item[field]) or not low <= item[field] <= high:
                raise BodyError(f"{where}.{field} must be an integer from {low} to {high}")
        problem = counter_name_problem(item.get("name"))
        if problem is not None:
            raise BodyError(f"{where}.name: {problem}")
        rows.append(CountRow(scope_key, item["day"], item["name"], item["value"]))
    return CountsArgs(tuple(rows))


def stats_args(body: Mapping[str, Any]) -> StatsArgs:
    """``{scopeKey? | scopeKeys?, prefix?, since}``: the counters of one scope, of a few,
    or of every scope (whose key starts with ``prefix``, when given), on the UTC day holding
    ``since`` (epoch milliseconds; 0: every day kept) and later."""
    if "scopeKey" in body and "scopeKeys" in body:
        raise BodyError("send scopeKey or scopeKeys, not both")
    keys: tuple[str, ...] | None = None
    if "scopeKey" in body:
        keys = (_scope_key(body),)
    elif "scopeKeys" in body:
        items = _required_list(body, "scopeKeys", MAX_STATS_SCOPES, "scope keys")
        for n, key in enumerate(items):
            problem = scope_key_problem(key)
            if problem is not None:
                raise BodyError(f"scopeKeys[{n}] {problem}")
        keys = tuple(items)
    prefix = None
    if "prefix" in body:
        prefix = body["prefix"]
        problem = identifier_problem(prefix, max_chars=MAX_SCOPE_KEY_CHARS)
        if problem is not None:
            raise BodyError(f"prefix {problem}")
    if "since" not in body:
        raise BodyError("since is required (epoch milliseconds; 0 reads every day kept)")
    return StatsArgs(keys, prefix, _bounded_int(body, "since", 0, MAX_IMPORT_INT))
