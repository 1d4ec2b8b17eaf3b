from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scopemem.core.records import (
    Candidate,
    Kind,
    Record,
    Source,
    Status,
    SweepResult,
    WireError,
    WriteCounts,
    from_wire,
    to_wire,
)

BASE = {
    "id": "mem:org:acme:1",
    "scopeKey": "org:acme",
    "kind": "fact",
    "text": "run npm ci first",
    "keywords": ["npm"],
    "sourceThreadKey": "slack:C1/5",
    "createdAt": 1_790_000_000_000,
    "useCount": 0,
    "status": "active",
    "source": "human",
}


def test_record_round_trips_in_camel_case_with_absent_optionals_omitted():
    record = from_wire(BASE, Record)
    assert record.scope_key == "org:acme" and record.kind is Kind.FACT
    assert record.last_used_at is None and record.confidence is None
    assert record.source is Source.HUMAN
    wire = to_wire(record)
    assert wire == BASE
    assert "null" not in json.dumps(wire)


def test_a_record_from_a_peer_that_sends_no_source_reads_as_reflection():
    older = {key: value for key, value in BASE.items() if key != "source"}
    record = from_wire(older, Record)
    assert record.source is Source.REFLECTION
    assert to_wire(record) == {**older, "source": "reflection"}
    assert from_wire({"kind": "fact", "text": "t", "sourceThreadKey": "s"},
                     Candidate).source is Source.REFLECTION
    with pytest.raises(WireError):
        from_wire({**BASE, "source": "oracle"}, Record)


def test_present_optionals_are_carried():
    full = {**BASE, "sourceRunId": "r-1", "lastUsedAt": 5, "confidence": 0.75,
            "supersedes": "mem:org:acme:0", "restates": "mem:org:acme:2", "status": "swept"}
    record = from_wire(full, Record)
    assert record.status is Status.SWEPT and record.restates == "mem:org:acme:2"
    assert to_wire(record) == full


OPTIONALS = {"source_run_id": st.text(min_size=1, max_size=3),
             "last_used_at": st.integers(0, 2**53), "confidence": st.floats(0, 1),
             "supersedes": st.text(min_size=1, max_size=3),
             "restates": st.text(min_size=1, max_size=3)}


@given(st.fixed_dictionaries({}, optional=OPTIONALS), st.sampled_from(list(Kind)),
       st.sampled_from(list(Status)), st.lists(st.text(max_size=3), max_size=2))
def test_a_records_wire_form_names_every_field_in_order_and_omits_absent_optionals(
        optionals, kind, status, keywords):
    record = attrs.evolve(from_wire(BASE, Record), kind=kind, status=status,
                          keywords=keywords, **optionals)
    wire = to_wire(record)
    names = [field.name for field in attrs.fields(Record)
             if field.name not in OPTIONALS or field.name in optionals]
    camel = {"scope_key": "scopeKey", "source_thread_key": "sourceThreadKey",
             "source_run_id": "sourceRunId", "created_at": "createdAt",
             "last_used_at": "lastUsedAt", "use_count": "useCount"}
    assert list(wire) == [camel.get(name, name) for name in names]
    assert from_wire(wire, Record) == record
    assert to_wire([record, record]) == [wire, wire]


def test_unknown_input_keys_are_ignored():
    assert from_wire({**BASE, "vector": [1, 2], "audience": "user"}, Record) == from_wire(
        BASE, Record)


@pytest.mark.parametrize(("change", "field"), [
    ({"createdAt": "5"}, "createdAt"),
    ({"createdAt": 1.5}, "createdAt"),
    ({"useCount": True}, "useCount"),
    ({"sourceThreadKey": 3}, "sourceThreadKey"),
    ({"keywords": [1]}, "keywords"),
    ({"keywords": "npm"}, "keywords"),
    ({"keywords": {"npm": 1}}, "keywords"),
    ({"text": ""}, "text"),
    ({"kind": "opinion"}, "Kind"),
    ({"confidence": 1.5}, "confidence"),
])
def test_malformed_records_are_refused_naming_the_field(change, field):
    with pytest.raises(WireError, match=field):
        from_wire({**BASE, **change}, Record)


def test_missing_required_field():
    data = dict(BASE)
    del data["scopeKey"]
    with pytest.raises(WireError, match="scopeKey"):
        from_wire(data, Record)


def test_candidate_wire_shape():
    candidate = Candidate(kind="summary", text="t", source_thread_key="th", restates="mem:x:1")
    assert to_wire(candidate) == {"kind": "summary", "text": "t", "sourceThreadKey": "th",
                                  "restates": "mem:x:1", "source": "reflection"}
    assert from_wire(to_wire(candidate), Candidate) == candidate


def test_counts_add_and_sweep_result_wire():
    total = WriteCounts(inserted=1, evicted=2) + WriteCounts(inserted=3, restated=1)
    assert total == WriteCounts(inserted=4, restated=1, evicted=2)
    # Every field adds to itself.
    assert WriteCounts(1, 2, 3, 4, 5, 6, 7) + WriteCounts(10, 20, 30, 40, 50, 60, 70) == (
        WriteCounts(11, 22, 33, 44, 55, 66, 77))
    assert to_wire(SweepResult(2)) == {"swept": 2}
    assert to_wire(SweepResult(1, ["mem:x:1"])) == {"swept": 1, "ids": ["mem:x:1"]}


def test_records_are_frozen_and_validated():
    record = from_wire(BASE, Record)
    with pytest.raises(AttributeError):
        record.text = "changed"  # type: ignore[misc]
    with pytest.raises(ValueError):
        Record(id="", scope_key="org:a", kind="fact", text="x", source_thread_key="t",
               created_at=0)
