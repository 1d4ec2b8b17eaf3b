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


@given(st.text(st.characters(max_codepoint=0x3000), min_size=1, max_size=12))
def test_a_key_is_refused_exactly_when_a_character_is_whitespace_or_control(key):
    refused = any(char.isspace() or unicodedata.category(char) in {"Cc", "Zl", "Zp"}
                  for char in key)
    assert (identifier_problem(key, max_chars=200) is not None) == refused


@pytest.mark.parametrize("key", ["org:a\x1fb", "org:a\x7fb", "org:a\x0bb", "org:\xa0",
                                 "org:\u3000", "org:\u200bb"])
def test_ascii_and_unicode_separators_are_judged_alike(key):
    refused = any(char.isspace() or unicodedata.category(char) in {"Cc", "Zl", "Zp"}
                  for char in key)
    assert (identifier_problem(key, max_chars=200) is not None) == refused


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
