"""Request bodies of the Memory Worker's data routes: parsed, checked, or refused with a reason.

The rules are ``schema.py``'s JSON Schema, the same the served OpenAPI document states: each
body is validated against its route's schema (compiled once by fastjsonschema), and a
refusal is worded from the schema node that failed, naming the field in the wire's own
spelling (``scopeKey``, ``records[2].text``) so a client's author can fix the call from the
400 alone. Keys a schema does not name are ignored, so a newer client's extra fields never
break an older server. What JSON Schema cannot state is checked here after it: ``/used``'s
total of ids, and an imported record's id naming its own scope (``core.porting``).

Candidates and records are built by the one wire converter (``scopemem.core.records``) once
their fields have passed.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import fastjsonschema

from scopemem.core.counters import counter_name_problem
from scopemem.core.porting import record_from_wire
from scopemem.core.records import (
    MAX_USED_IDS,
    Candidate,
    CountRow,
    Kind,
    Record,
    WireError,
    from_wire,
)
from scopemem.core.scopes import identifier_problem, pointer_problem
from scopemem.core.text import is_text
from scopemem.worker_aiohttp.schema import (
    KEY_PATTERN,
    POINTER_PATTERN,
    REQUESTS,
    SCHEMAS,
    Schema,
)


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


def _number(literal: str) -> int | float:
    """A JSON number with a fraction or an exponent: the integer it is when it has no
    fraction (``350.0``, ``1e2``), as JSON Schema counts it; else the float."""
    value = float(literal)
    return int(value) if value.is_integer() else value


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_number)


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


def _string_problem(value: str) -> str | None:
    return None if value.isascii() or is_text(value) else _SURROGATE


def _unencodable(value: Any, where: str) -> tuple[str, str] | None:
    """The path of the first string in a decoded body (a key or a value) no store can
    keep, and why: one that cannot be encoded as UTF-8 (JSON's ``\\ud800`` escapes decode
    to lone surrogates, which no answer can carry either). None when every string is
    text. (A NUL character is refused by the schema, in the fields it knows:
    ``schema.NO_NUL_PATTERN``.) A walk with a stack of its own, not recursion: a body
    the decoder took, however deep, is walked whole."""
    # (is a key, the value, its path), first in the body's order on top.
    stack: list[tuple[bool, Any, str]] = [(False, value, where)]
    while stack:
        is_key, item, path = stack.pop()
        if isinstance(item, str):
            problem = _string_problem(item)
            if problem is not None:
                return (path or "body", f"has a key that {problem}") if is_key \
                    else (path or "body", problem)
        elif isinstance(item, dict):
            for key, inner in reversed(item.items()):
                stack.append((False, inner, f"{path}.{key}" if path else str(key)))
                stack.append((True, key, path))
        elif isinstance(item, list):
            stack.extend((False, inner, f"{path}[{index}]")
                         for index, inner in reversed(list(enumerate(item))))
    return None


# --- the schema's verdict ----------------------------------------------------------------------


@functools.cache
def _validator(name: str) -> Callable[[Any], Any]:
    """The compiled check of a route's body (``/write``) or of a named schema
    (``Candidate``), ``$ref``s resolved against ``schema.SCHEMAS``."""
    schema = REQUESTS[name] if name.startswith("/") else SCHEMAS[name]
    root = {**schema, "components": {"schemas": SCHEMAS}}
    return fastjsonschema.compile(root, use_default=False)


def check(name: str, value: Any, where: str = "") -> None:
    """Raise ``BodyError`` when ``value`` breaks the schema ``name``; ``where`` is its path
    in the body (empty for a whole body)."""
    try:
        _validator(name)(value)
    except fastjsonschema.JsonSchemaValueException as exc:
        path = (exc.name or "data").removeprefix("data").removeprefix(".")
        if where:
            path = f"{where}.{path}" if path and not path.startswith("[") else where + path
        raise BodyError(_reason(exc, path)) from None


def _reason(exc: fastjsonschema.JsonSchemaValueException, where: str) -> str:
    """The refusal, worded from the failing schema node: what the field must be."""
    node: Schema = exc.definition if isinstance(exc.definition, dict) else {}
    value, rule = exc.value, exc.rule
    if rule == "required":
        missing = next(field for field in node["required"] if field not in value)
        return f"{where}.{missing} is required" if where else f"{missing} is required"
    if rule == "not":
        return f"send {node['not']['description']}"
    if node == SCHEMAS["CounterName"]:
        return f"{where}: {counter_name_problem(value)}"
    return f"{where or 'body'} {_must(node, rule, value)}"


def _must(node: Schema, rule: str | None, value: Any) -> str:
    if node.get("pattern") == KEY_PATTERN:  # a key or an id: the rule's own words
        return identifier_problem(value, max_chars=node["maxLength"]) or "must be a key"
    if "enum" in node:
        return f"must be one of: {', '.join(node['enum'])}"
    kind = node.get("type")
    if kind in ("integer", "number"):
        noun = "an integer" if kind == "integer" else "a number"
        return f"must be {noun} from {node['minimum']} to {node['maximum']}"
    if kind == "array":
        if rule == "maxItems":
            return f"must hold at most {node['maxItems']} items"
        return "must be a list" + (" of strings" if node["items"].get("type") == "string"
                                   else "")
    if rule == "maxLength":
        return f"must be at most {node['maxLength']} characters"
    if rule == "pattern" and "\u0000" in value:
        return "holds a NUL character (U+0000), which no store keeps"
    if rule == "pattern" and node.get("pattern") == POINTER_PATTERN:
        return pointer_problem(value) or "must be a memory id"
    if rule == "pattern":
        return f"must match the pattern {node['pattern']!r}"
    if rule == "minLength" or (kind == "string" and node.get("minLength")):
        return "must be a non-empty string"
    if kind == "string" and "maxLength" in node:
        return f"must be a string of at most {node['maxLength']} characters"
    if kind in ("string", "boolean", "object"):
        return f"must be {'an' if kind == 'object' else 'a'} {kind}"
    return f"does not fit the schema ({rule})"  # pragma: no cover - every rule is worded above


# --- one function per route --------------------------------------------------------------------


def parse_candidate(item: Any, where: str) -> Candidate:
    """One element of ``records``; ``where`` is its path (``records[3]``) for the reason."""
    check("Candidate", item, where)
    return _candidate(item, where)


def _candidate(item: Any, where: str) -> Candidate:
    """A candidate the schema passed, built by the wire converter."""
    try:
        return from_wire(item, Candidate)
    except WireError as exc:  # the schema should leave nothing for it to find
        raise BodyError(f"{where}: {exc}") from None


def retrieve_args(body: Mapping[str, Any]) -> RetrieveArgs:
    check("/retrieve", body)
    return RetrieveArgs(body["scopeKey"], body["query"], body["limit"], body.get("bump", True))


def used_args(body: Mapping[str, Any]) -> UsedArgs:
    """``{"used": [{"scopeKey": …, "ids": [id, …]}, …]}``: the records a client showed."""
    check("/used", body)
    used: dict[str, list[str]] = {}
    for item in body["used"]:
        used.setdefault(item["scopeKey"], []).extend(item["ids"])
    if sum(len(ids) for ids in used.values()) > MAX_USED_IDS:
        raise BodyError(f"used must hold at most {MAX_USED_IDS} ids in all")
    return UsedArgs({key: tuple(ids) for key, ids in used.items()})


def write_args(body: Mapping[str, Any]) -> WriteArgs:
    check("/write", body)
    candidates = tuple(_candidate(item, f"records[{n}]")
                       for n, item in enumerate(body["records"]))
    return WriteArgs(body["scopeKey"], candidates, body.get("cap"))


def list_args(body: Mapping[str, Any]) -> ListArgs:
    check("/list", body)
    kind = Kind(body["kind"]) if "kind" in body else None
    return ListArgs(body["scopeKey"], body["limit"], body.get("query"), kind)


def forget_args(body: Mapping[str, Any]) -> ForgetArgs:
    check("/forget", body)
    return ForgetArgs(body["scopeKey"], body["id"])


def sweep_args(body: Mapping[str, Any]) -> SweepArgs:
    check("/sweep", body)
    return SweepArgs(body["scopeKey"], body.get("dryRun", False))


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
    check("/scopes", body)
    return ScopesArgs(body.get("after"), body["limit"])


def export_args(body: Mapping[str, Any]) -> ExportArgs:
    """``{scopeKey, after?, limit}``: the scope's records with a seq above ``after``."""
    check("/export", body)
    return ExportArgs(body["scopeKey"], body.get("after", 0), body["limit"])


_RECORD_FIELD = re.compile(r"^(records\[\d+\])\.")


def import_args(body: Mapping[str, Any], now: int | None = None) -> ImportArgs:
    """``{records: [Record, …]}``, each an exported record (``core.porting``; no time after
    the clock ``now`` plus the skew, when given). A record's reason reads
    ``records[2]: text …``, as the checks ``core.porting`` adds say it."""
    try:
        check("/import", body)
    except BodyError as exc:
        raise BodyError(_RECORD_FIELD.sub(r"\1: ", str(exc))) from None
    records = []
    for n, item in enumerate(body["records"]):
        try:
            records.append(record_from_wire(item, now))
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
    check("/counts", body)
    return CountsArgs(tuple(CountRow(item["scopeKey"], item["day"], item["name"],
                                     item["value"]) for item in body["counts"]))


def stats_args(body: Mapping[str, Any]) -> StatsArgs:
    """``{scopeKey? | scopeKeys?, prefix?, since}``: the counters of one scope, of a few,
    or of every scope (whose key starts with ``prefix``, when given), on the UTC day holding
    ``since`` (epoch milliseconds; 0: every day kept) and later."""
    check("/stats", body)
    keys: tuple[str, ...] | None = None
    if "scopeKey" in body:
        keys = (body["scopeKey"],)
    elif "scopeKeys" in body:
        keys = tuple(body["scopeKeys"])
    return StatsArgs(keys, body.get("prefix"), body["since"])
