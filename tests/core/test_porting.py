"""What an import takes (``core.porting``): times no later than the importer's clock plus a
small skew, use counts a store could reach, and a source only someone vouches for."""

from __future__ import annotations

import attrs
import pytest

from scopemem.core.porting import (
    MAX_CLOCK_SKEW_MS,
    MAX_USE_COUNT,
    parse_record_line,
    record_line,
    record_problem,
    reflection_sourced,
)
from scopemem.core.records import Kind, Record, Source, WireError

NOW = 1_800_000_000_000
YEAR_2100 = 4_102_444_800_000
RECORD = Record(id="mem:org:acme:1", scope_key="org:acme", kind=Kind.FACT, text="a fact",
                source_thread_key="t/1", created_at=NOW - 1000)


@pytest.mark.parametrize("field", ["created_at", "last_used_at"])
def test_a_time_after_the_clock_and_its_skew_is_refused_naming_the_field(field: str):
    at_the_edge = attrs.evolve(RECORD, **{field: NOW + MAX_CLOCK_SKEW_MS})
    assert record_problem(at_the_edge, NOW) is None
    ahead = attrs.evolve(RECORD, **{field: NOW + MAX_CLOCK_SKEW_MS + 1})
    wire = "createdAt" if field == "created_at" else "lastUsedAt"
    assert record_problem(ahead, NOW) == (
        f"{wire} {NOW + MAX_CLOCK_SKEW_MS + 1} is in the future (after now, {NOW}, plus 5"
        " minutes of clock skew)")
    with pytest.raises(WireError, match=f"{wire} {YEAR_2100} is in the future"):
        parse_record_line(record_line(attrs.evolve(RECORD, **{field: YEAR_2100})), NOW)
    # Without a clock (a peer's export read back) no time is judged.
    assert record_problem(ahead) is None


def test_a_use_count_beyond_what_a_store_reaches_is_refused():
    assert record_problem(attrs.evolve(RECORD, use_count=MAX_USE_COUNT)) is None
    assert record_problem(attrs.evolve(RECORD, use_count=10**12), NOW) == (
        f"useCount 1000000000000 is above {MAX_USE_COUNT}, more than a store counts")


def test_a_record_nobody_vouches_for_is_reflection_sourced():
    human = attrs.evolve(RECORD, source=Source.HUMAN)
    assert reflection_sourced(human) == attrs.evolve(RECORD, source=Source.REFLECTION)
    assert reflection_sourced(RECORD) is RECORD


def test_a_pointer_must_be_a_memory_id_of_any_scope():
    """``supersedes`` / ``restates``: absent, empty or a memory id; one naming another
    scope, or no record, is imported as it is (it points at nothing)."""
    for value in (None, "", "mem:user:slack:U2:7", "mem:org:acme:99"):
        assert record_problem(attrs.evolve(RECORD, supersedes=value, restates=value)) is None
    assert record_problem(attrs.evolve(RECORD, supersedes="garbage id")) == (
        "supersedes is not a memory id (mem:<scopeKey>:<n>)")
    with pytest.raises(WireError, match="restates is not a memory id"):
        parse_record_line(record_line(attrs.evolve(RECORD, restates="mem:org:acme")), NOW)
