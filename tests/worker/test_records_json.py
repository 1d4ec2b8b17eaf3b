"""Record lists are written with each record's unchanging part remembered: the text must be
the generic encoding's, byte for byte, however the records and their use figures vary."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scopemem.core.records import Kind, Record, Status, from_wire, to_wire
from scopemem.worker_aiohttp.records_json import RecordsJson, dumps

# Short texts over characters JSON must escape or may write as they are.
TEXT = st.text(st.sampled_from('ab "\\/\n\t\x00\x1f\u00e9\u2028\U0001f600'), max_size=6)

RECORDS = st.builds(
    Record,
    id=st.sampled_from(["mem:org:acme:1", "mem:org:acme:2", "mem:user:slack:U1:3"]),
    scope_key=st.sampled_from(["org:acme", "user:slack:U1"]),
    kind=st.sampled_from(list(Kind)),
    text=TEXT.filter(lambda text: text.strip() != ""),
    keywords=st.lists(TEXT, max_size=3).map(tuple),
    source_thread_key=TEXT,
    source_run_id=st.none() | TEXT,
    created_at=st.integers(0, 2**53),
    last_used_at=st.none() | st.integers(0, 2**53),
    use_count=st.integers(0, 2**40),
    # 1 and 1.0 (and 0 and 0.0) are equal, but not the same JSON.
    confidence=st.none() | st.sampled_from([0, 1, 0.0, 1.0, 0.5]) | st.floats(0, 1),
    supersedes=st.none() | TEXT,
    restates=st.none() | TEXT,
    status=st.sampled_from(list(Status)),
)


def generic(records: list[Record]) -> str:
    return dumps({"records": to_wire(records)})


@settings(max_examples=300)
@given(st.lists(st.lists(RECORDS, max_size=4), min_size=1, max_size=4))
def test_the_text_is_the_generic_encodings_for_every_answer(answers):
    # One encoder across answers, so records seen before are written from memory.
    encoder = RecordsJson()
    for records in answers:
        text = encoder.encode(records)
        assert text == generic(records)
        assert [from_wire(r, Record) for r in json.loads(text)["records"]] == records


@given(RECORDS, st.lists(st.tuples(st.none() | st.integers(0, 2**53), st.integers(0, 99)),
                         min_size=1, max_size=5))
def test_only_the_use_figures_change_between_answers(record, uses):
    encoder = RecordsJson()
    for last_used_at, use_count in uses:
        bumped = attrs.evolve(record, last_used_at=last_used_at, use_count=use_count)
        assert encoder.encode([bumped]) == generic([bumped])
    assert len(encoder) == 1


BASE = Record(id="mem:org:acme:1", scope_key="org:acme", kind=Kind.FACT, text="deploy",
              keywords=("ci",), source_thread_key="t", source_run_id="r", created_at=5,
              last_used_at=9, use_count=2, confidence=1, supersedes="s", restates="x")


@pytest.mark.parametrize("change", [
    {"id": "mem:org:acme:2"}, {"scope_key": "org:other"}, {"kind": Kind.SUMMARY},
    {"text": "deploy!"}, {"keywords": ("ci", "cd")}, {"keywords": ()},
    {"source_thread_key": "u"}, {"source_run_id": None}, {"created_at": 6},
    {"confidence": 1.0}, {"confidence": None}, {"supersedes": None}, {"restates": "y"},
    {"status": Status.FORGOTTEN},
])
def test_a_record_differing_in_any_one_field_is_written_as_itself(change):
    encoder = RecordsJson()
    other = attrs.evolve(BASE, **change)
    for records in ([BASE], [other], [BASE, other]):
        assert encoder.encode(records) == generic(records)


def test_the_memory_is_bounded():
    encoder = RecordsJson(max_entries=3)
    records = [Record(id=f"mem:org:acme:{n}", scope_key="org:acme", kind=Kind.FACT,
                      text=f"note {n}", source_thread_key="t", created_at=n)
               for n in range(10)]
    for record in records:
        assert encoder.encode([record]) == generic([record])
        assert len(encoder) <= 3
    assert encoder.encode(records) == generic(records)

