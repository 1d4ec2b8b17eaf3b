from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scopemem.core.scopes import (
    MemoryIdError,
    ScopeKeyError,
    identifier_problem,
    memory_id,
    order_scope_keys,
    parse_memory_id,
    scope_kind,
    validate_scope_key,
)


@pytest.mark.parametrize("key", ["org:acme", "user:slack:U0123", "repo:owner/name",
                                 "x" * 200, "guild:discord:123"])
def test_valid_scope_keys(key):
    assert validate_scope_key(key) == key


@pytest.mark.parametrize("key", ["", "x" * 201, "org:a b", "org:a\tb", "org:a\nb",
                                 "org:a\u2028b", "org:\x00", "org:\x85", None, 5])
def test_invalid_scope_keys(key):
    with pytest.raises(ScopeKeyError):
        validate_scope_key(key)


# Default_Ignorable_Code_Point beyond the format characters (DerivedCoreProperties.txt).
_IGNORABLE = {0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, *range(0x180B, 0x1810), 0x2065, 0x3164,
              *range(0xFE00, 0xFE10), 0xFFA0, *range(0xFFF0, 0xFFF9), *range(0xE0000, 0xE1000)}


def refused_character(char):
    return (char.isspace() or unicodedata.category(char) in {"Cc", "Zl", "Zp", "Cf"}
            or ord(char) in _IGNORABLE)


@given(st.text(st.one_of(st.characters(max_codepoint=0x3000),
                         st.characters(categories=["Cf"]),
                         st.characters(min_codepoint=0xE0000, max_codepoint=0xE01EF)),
               min_size=1, max_size=12))
def test_a_key_is_refused_exactly_when_a_character_is_whitespace_control_or_invisible(key):
    refused = any(refused_character(char) for char in key)
    assert (identifier_problem(key, max_chars=200) is not None) == refused


@pytest.mark.parametrize("key", ["org:a\x1fb", "org:a\x7fb", "org:a\x0bb", "org:\xa0",
                                 "org:\u3000", "org:\u200bb"])
def test_ascii_and_unicode_separators_are_judged_alike(key):
    refused = any(refused_character(char) for char in key)
    assert (identifier_problem(key, max_chars=200) is not None) == refused


@pytest.mark.parametrize("key", [
    "org:acme\u200b",  # zero width space
    "org:ac\u200dme", "org:ac\u200cme",  # joiners
    "org:\u2060acme", "org:acme\ufeff", "org:ac\u00adme",  # word joiner, BOM, soft hyphen
    "org:\u202eemca", "org:\u2066acme\u2069", "org:acme\u200e", "org:acme\u061c",  # bidi
    "org:acme\U000e0041", "org:acme\U000e0001",  # TAG characters
    "org:acme\ufe0f", "org:acme\u034f", "org:acme\u3164",  # variation selector, CGJ, filler
])
def test_invisible_characters_are_refused_so_no_key_poses_as_another(key):
    assert identifier_problem(key, max_chars=200) == (
        "must not contain invisible characters (zero width, bidi control, TAG, ...)")
    with pytest.raises(ScopeKeyError, match="scope key must not contain invisible"):
        validate_scope_key(key)
    with pytest.raises(MemoryIdError):
        parse_memory_id(f"mem:{key}:1")


@pytest.mark.parametrize("key", ["org:café", "channel:slack:\u0645\u06cc", "org:\uff41cme"])
def test_visible_non_ascii_keys_are_fine(key):
    assert validate_scope_key(key) == key


def test_memory_ids_split_on_the_last_colon():
    assert parse_memory_id("mem:user:slack:U0123:42") == ("user:slack:U0123", 42)
    assert memory_id("channel:slack:C1", 7) == "mem:channel:slack:C1:7"
    assert parse_memory_id(memory_id("repo:o/n", 3)) == ("repo:o/n", 3)


@pytest.mark.parametrize("bad", ["", "mem:", "mem:org:acme", "mem::1", "org:acme:1",
                                 "mem:org:acme:x", "mem:org:acme:-1", "mem:org:acme:١",
                                 "mem:org acme:1", "mem:" + "x" * 300 + ":1", None])
def test_not_memory_ids(bad):
    with pytest.raises(MemoryIdError, match="mem:<scope>:<number>"):
        parse_memory_id(bad)


def test_scope_kind_and_ordering_widest_first():
    breadth = {"org": 0, "repo": 10, "channel": 20, "user": 30}
    keys = ["user:slack:U1", "guild:discord:1", "channel:slack:C1", "org:acme", "repo:o/n"]
    assert order_scope_keys(keys, breadth) == [
        "org:acme", "repo:o/n", "channel:slack:C1", "user:slack:U1", "guild:discord:1"]
    assert scope_kind("user:slack:U1") == "user"
