"""The engine's light ranking path and the trusted record constructor answer exactly like the
plain ones (stores use them on the read path; InMemoryStore uses ``rank_records``)."""

from __future__ import annotations

import attrs
from hypothesis import strategies as st

from scopemem.core.records import Kind, Record, Status, to_wire, trusted_record, with_uses

NOW = 1_790_000_000_000
SCOPE = "org:acme"
WORDS = ("cache", "deploy", "rule", "db", "a", "x1", "redis", "staging", "prod", "lint")

texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)
records = st.lists(
    st.builds(
        lambda text, keywords, created, used, uses, status: (text, keywords, created, used,
                                                              uses, status),
        texts,
        st.lists(st.sampled_from(WORDS), max_size=2),
        st.integers(0, 60).map(lambda d: NOW - d * 86_400_000),
        st.one_of(st.none(), st.integers(0, 60).map(lambda d: NOW - d * 3_600_000)),
        st.integers(0, 5),
        st.sampled_from(list(Status)),
    ),
    max_size=25,
).map(lambda rows: [
    Record(id=f"mem:{SCOPE}:{n + 1}", scope_key=SCOPE, kind=Kind.FACT, text=text,
           keywords=keywords, source_thread_key="t", created_at=created, last_used_at=used,
           use_count=uses, status=status)
    for n, (text, keywords, created, used, uses, status) in enumerate(rows)])


def test_trusted_record_equals_the_validating_constructor():
    fields = dict(id=f"mem:{SCOPE}:7", scope_key=SCOPE, kind="summary", text="t",
                  keywords=["a", "b"], source_thread_key="s", source_run_id="r",
                  created_at=5, last_used_at=9, use_count=3, confidence=0.5,
                  supersedes="mem:x:1", restates=None, status="swept", source="human")
    # trusted_record sets every field by name and position: a new field must reach it.
    assert tuple(fields) == tuple(field.name for field in attrs.fields(Record))
    checked = Record(**fields)
    fast = trusted_record(*fields.values())
    assert fast == checked
    assert fast.kind is Kind.SUMMARY and fast.status is Status.SWEPT
    assert fast.keywords == ("a", "b") and type(fast.keywords) is tuple
    assert to_wire(fast) == to_wire(checked)
    assert hash(fast) == hash(checked)
    assert attrs.evolve(fast, use_count=4) == attrs.evolve(checked, use_count=4)


def test_a_record_with_uses_added_keeps_every_other_field():
    """``with_uses`` copies the record field by field: one left out would read as unset."""
    values = dict(id=f"mem:{SCOPE}:7", scope_key=SCOPE, kind="summary", text="t",
                  keywords=["a", "b"], source_thread_key="s", source_run_id="r",
                  created_at=5, last_used_at=9, use_count=3, confidence=0.5,
                  supersedes="mem:x:1", restates="mem:x:2", status="swept", source="human")
    assert tuple(values) == tuple(field.name for field in attrs.fields(Record))
    record = Record(**values)
    used = with_uses(record, 2, 11)
    assert used == attrs.evolve(record, use_count=5, last_used_at=11)
    assert to_wire(used) == to_wire(attrs.evolve(record, use_count=5, last_used_at=11))
    assert hash(used) == hash(attrs.evolve(record, use_count=5, last_used_at=11))
    assert with_uses(record, 0, None) == attrs.evolve(record, last_used_at=None)

