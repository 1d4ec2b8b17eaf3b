"""Scope keys and memory ids.

A scope key is an opaque, platform-namespaced string: ``org:acme``, ``repo:owner/name``,
``channel:slack:C0456``, ``user:slack:U0123``. Its kind is the part before the first colon.
Stores partition by key and know nothing else about it, so a new kind of scope is a deriver
(a plugin), never a schema change.

A memory id is ``mem:<scopeKey>:<seq>``. Scope keys contain colons, so the sequence number is
the part after the *last* colon.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping

from scopemem.core.records import MAX_ID_CHARS

MAX_SCOPE_KEY_CHARS = 200
MEMORY_ID_PREFIX = "mem:"
#: The scope a readiness check reads (``stores.health.store_ready``): the worker's ``/readyz``
#: and ``scopemem health`` list one record of it. Nothing writes it; reading it shows the
#: store can answer a read without touching anyone's memory.
READINESS_SCOPE = "scopemem:readiness"


class ScopeKeyError(ValueError):
    """A string that cannot be a scope key; the message says why."""


class MemoryIdError(ValueError):
    """A string that is not a memory id (``mem:<scopeKey>:<n>``)."""


def _is_space_or_control(char: str) -> bool:
    return char.isspace() or unicodedata.category(char) in {"Cc", "Zl", "Zp"}


#: The default-ignorable code points that are not format characters (Cf): the combining
#: grapheme joiner, the Hangul fillers, the Khmer inherent vowels, the variation selectors
#: and the rest of the TAG and variation-selector planes. Unassigned ones are included, as
#: Unicode's Default_Ignorable_Code_Point does, so a newer Unicode cannot open a gap.
_IGNORABLE_RANGES = (
    (0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F),
    (0x2065, 0x2065), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8), (0xE0000, 0xE0FFF),
)


def _is_invisible(char: str) -> bool:
    """A format character (zero width, bidi control, BOM, TAG, ...) or any other default
    ignorable code point: drawn as nothing, so ``org:acme\u200b`` would pass for
    ``org:acme``."""
    if unicodedata.category(char) == "Cf":
        return True
    cp = ord(char)
    return any(first <= cp <= last for first, last in _IGNORABLE_RANGES)


def identifier_problem(value: object, *, max_chars: int) -> str | None:
    """Why ``value`` is unusable as a key or id (None when it is fine).

    The rule the worker applies to every key and id it receives: a non-empty string, bounded
    length, no whitespace or control characters (they would let a key smuggle a line or a
    path separator into logs), and no invisible ones (format characters such as the zero
    width space, bidi controls and TAG characters, or other default-ignorable code points
    such as variation selectors), which would let one key pose as another."""
    if not isinstance(value, str):
        return "must be a string"
    if not value:
        return "must not be empty"
    if len(value) > max_chars:
        return f"must be at most {max_chars} characters"
    # ASCII (nearly every key): the printable characters are exactly those that are not
    # control characters, the only printable whitespace is the space, and none is invisible.
    if value.isascii():
        if value.isprintable() and " " not in value:
            return None
    elif not any(_is_space_or_control(char) for char in value):
        if any(_is_invisible(char) for char in value):
            return "must not contain invisible characters (zero width, bidi control, TAG, ...)"
        return None
    return "must not contain whitespace or control characters"


def scope_key_problem(key: object) -> str | None:
    return identifier_problem(key, max_chars=MAX_SCOPE_KEY_CHARS)


def validate_scope_key(key: object) -> str:
    problem = scope_key_problem(key)
    if problem is not None:
        raise ScopeKeyError(f"scope key {problem}")
    assert isinstance(key, str)
    return key


def scope_kind(key: str) -> str:
    """``"org"`` for ``org:acme``; the whole key when it has no colon."""
    return key.split(":", 1)[0]


def memory_id(scope_key: str, seq: int) -> str:
    return f"{MEMORY_ID_PREFIX}{scope_key}:{seq}"


def parse_memory_id(value: object) -> tuple[str, int]:
    """Split ``mem:<scopeKey>:<seq>`` into the scope key and the sequence number."""
    if identifier_problem(value, max_chars=MAX_ID_CHARS) is not None:
        raise MemoryIdError("a memory id looks like mem:<scope>:<number>")
    assert isinstance(value, str)
    if not value.startswith(MEMORY_ID_PREFIX):
        raise MemoryIdError("a memory id looks like mem:<scope>:<number>")
    scope_key, sep, seq = value[len(MEMORY_ID_PREFIX):].rpartition(":")
    if not sep or not scope_key or not seq.isascii() or not seq.isdigit():
        raise MemoryIdError("a memory id looks like mem:<scope>:<number>")
    return scope_key, int(seq)


def pointer_problem(value: str | None) -> str | None:
    """Why ``value`` cannot be a ``supersedes`` or ``restates`` off the wire; None when it
    can: absent, empty (no pointer) or a memory id. The id may name another scope or no
    record at all: such a pointer retires or restates nothing, and the write still lands."""
    if not value:
        return None
    try:
        parse_memory_id(value)
    except MemoryIdError:
        return "is not a memory id (mem:<scopeKey>:<n>)"
    return None


def record_seq(record_id: str) -> int:
    """The sequence number of a record's id; 0 for anything else (sorts first, never raises).

    On the ranking hot path, so it only splits: ids reaching here were minted by a store."""
    head, sep, tail = record_id.rpartition(":")
    if sep and head.startswith(MEMORY_ID_PREFIX) and tail.isascii() and tail.isdigit():
        return int(tail)
    return 0


def order_scope_keys(keys: Iterable[str], breadth: Mapping[str, int]) -> list[str]:
    """Widest shared scope first, the person's own last (``breadth`` maps kind → rank, lower
    is wider). Keys of unknown kinds go last; ties keep their given order."""
    unknown = max(breadth.values(), default=0) + 1
    return sorted(dict.fromkeys(keys), key=lambda key: breadth.get(scope_kind(key), unknown))
