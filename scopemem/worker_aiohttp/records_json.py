"""The JSON text of the worker's answers, and of record lists with each record's unchanging
part encoded once.

A retrieval answers a few records, and the same records again and again: only their last
use and use count move between two answers. Encoding every record's wire form anew was
about a sixth of the worker's CPU per retrieval, so ``RecordsJson`` keeps the text around
those two numbers for the records it has seen and writes only the numbers each time. The
result is the same text, byte for byte, as ``dumps({"records": to_wire(records)})``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from scopemem.core.records import Record, to_wire

__all__ = ["RecordsJson", "dumps"]

# Compact and UTF-8 (not \u escapes), as every answer of the worker is written.
dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

DEFAULT_MAX_ENTRIES = 20_000


class RecordsJson:
    """Writes ``{"records": [...]}`` for a list of records, remembering for each record the
    text before and after its use figures (at most ``max_entries`` records: past that the
    memory starts over, which costs one encoding per record)."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._parts: dict[tuple[Any, ...], tuple[str, str]] = {}

    def __len__(self) -> int:
        return len(self._parts)

    def encode(self, records: Sequence[Record], extra: str = "") -> str:
        """``{"records": [...]}``; ``extra`` (``,"key":value`` pairs, already JSON) is
        written after the list."""
        parts = self._parts
        out = []
        for record in records:
            last_used_at, use_count = record.last_used_at, record.use_count
            if type(use_count) is not int or not (
                    last_used_at is None or type(last_used_at) is int):
                out.append(dumps(to_wire(record)))  # numbers ints do not spell the same way
                continue
            confidence = record.confidence
            # Every field the two parts are made of, and the confidence's type: 1 and 1.0
            # are equal keys but different JSON.
            key = (record.id, record.scope_key, record.kind, record.text, record.keywords,
                   record.source_thread_key, record.source_run_id, record.created_at,
                   confidence, type(confidence), record.supersedes, record.restates,
                   record.status)
            cached = parts.get(key)
            if cached is None:
                cached = _parts_of(record)
                if len(parts) >= self.max_entries:
                    parts.clear()
                parts[key] = cached
            head, tail = cached
            if last_used_at is None:
                out.append(f'{head},"useCount":{use_count}{tail}')
            else:
                out.append(f'{head},"lastUsedAt":{last_used_at},"useCount":{use_count}{tail}')
        return '{"records":[' + ",".join(out) + "]" + extra + "}"


def _parts_of(record: Record) -> tuple[str, str]:
    """The record's JSON object before ``lastUsedAt`` (without its closing brace) and after
    ``useCount`` (with a leading comma). In the wire form's key order the two use figures
    sit together, between ``createdAt`` and the optional fields."""
    wire = to_wire(record)
    keys = list(wire)
    split = keys.index("useCount")
    before = {key: wire[key] for key in keys[:split] if key != "lastUsedAt"}
    after = {key: wire[key] for key in keys[split + 1:]}
    head = dumps(before)[:-1]
    tail = "," + dumps(after)[1:] if after else "}"
    return head, tail
