"""Write hygiene: every candidate fits the record contract the worker's validator checks."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scopemem.core.hygiene import (
    NO_THREAD_KEY,
    cut_text,
    fit_candidate,
    fit_keywords,
    noise_reason,
)
from scopemem.core.records import (
    MAX_KEYWORD_CHARS,
    MAX_KEYWORDS,
    MAX_SOURCE_CHARS,
    MAX_TEXT_CHARS,
    Candidate,
    Kind,
    to_wire,
)
from scopemem.worker_aiohttp.validation import parse_body, parse_candidate


def test_a_candidate_that_fits_is_returned_as_it_is():
    candidate = Candidate(kind=Kind.FACT, text="run npm ci first", source_thread_key="t",
                          keywords=("npm",))
    assert fit_candidate(candidate) is candidate


def test_text_is_cut_at_a_word_boundary():
    assert cut_text("alpha beta gamma", 12) == "alpha beta"
    assert cut_text("alpha beta gamma", 11) == "alpha beta"
    assert cut_text("alpha beta", 10) == "alpha beta"
    assert cut_text("x" * 20, 8) == "x" * 8  # no boundary: cut where the cap is
    text = cut_text("word " * 2000, MAX_TEXT_CHARS)
    assert len(text) <= MAX_TEXT_CHARS and text.endswith("word")


def test_long_keywords_give_way_to_their_tokens_and_the_list_is_capped():
    long_keyword = "deploy-" * 12  # 84 characters
    assert fit_keywords((long_keyword, "deploy", "", " vpn ", "vpn")) == ("deploy", "vpn")
    assert fit_keywords(None) is None
    assert fit_keywords(tuple(f"k{n}" for n in range(40))) == tuple(
        f"k{n}" for n in range(MAX_KEYWORDS))
    assert fit_keywords(("x" * 65,)) == ()  # one token too long to keep at all


def test_an_empty_thread_key_gets_a_placeholder():
    candidate = Candidate(kind=Kind.SUMMARY, text="s", source_thread_key="")
    assert fit_candidate(candidate).source_thread_key == NO_THREAD_KEY


# Any code point, lone surrogates included (a JSON "\ud800" escape decodes to one).
_ANY = st.characters(exclude_categories=())


@given(
    text=st.text(_ANY, min_size=1, max_size=6000),
    keywords=st.one_of(st.none(), st.lists(st.text(_ANY, max_size=120), max_size=30).map(tuple)),
    thread_key=st.text(_ANY, max_size=400),
    run_id=st.one_of(st.none(), st.text(_ANY, max_size=400)),
    pointer=st.one_of(st.none(), st.text(_ANY, max_size=400)),
    kind=st.sampled_from(list(Kind)),
)
def test_whatever_a_producer_offers_the_worker_accepts_once_fitted(text, keywords, thread_key,
                                                                   run_id, pointer, kind):
    candidate = Candidate(kind=kind, text=text, source_thread_key=thread_key,
                          source_run_id=run_id, keywords=keywords, supersedes=pointer)
    fitted = fit_candidate(candidate)
    # The server's own validator, on the client's own wire form: one definition of the caps.
    body = parse_body(json.dumps({"records": [to_wire(fitted)]}).encode())
    parsed = parse_candidate(body["records"][0], "records[0]")
    assert parsed == fitted
    assert len(fitted.source_thread_key) <= MAX_SOURCE_CHARS
    assert len(fitted.source_run_id or "") <= MAX_SOURCE_CHARS
    assert len(fitted.text) <= MAX_TEXT_CHARS
    assert all(len(keyword) <= MAX_KEYWORD_CHARS for keyword in fitted.keywords or ())
    assert fitted.text.encode("utf-8")  # never a lone surrogate
    assert fit_candidate(fitted) == fitted


def test_nul_is_removed_from_every_string_and_provenance_is_capped():
    candidate = Candidate(kind=Kind.FACT, text="deploy\x00s need the vpn",
                          source_thread_key="\x00" + "t" * 300, source_run_id="\x00",
                          keywords=("v\x00pn", "\x00"), supersedes="mem:" + "x" * 300,
                          restates="mem:org:a:1\x00")
    fitted = fit_candidate(candidate)
    assert fitted.text == "deploys need the vpn" and fitted.keywords == ("vpn",)
    assert fitted.source_thread_key == "t" * MAX_SOURCE_CHARS and fitted.source_run_id == ""
    assert fitted.supersedes is None and fitted.restates == "mem:org:a:1"
    # A pointer that is no memory id could name no record: dropped, as the worker refuses it.
    assert fit_candidate(Candidate(kind=Kind.FACT, text="a fact", source_thread_key="t",
                                   supersedes="garbage id")).supersedes is None
    # Nothing but NULs: a text that is never empty, and that the salience rule drops.
    only = fit_candidate(Candidate(kind=Kind.FACT, text="\x00\x00", source_thread_key="t"))
    assert only.text and noise_reason(only.text) == "short"


@pytest.mark.parametrize(("text", "reason"), [
    ("", "empty"), (" \n\t", "empty"), ("\x00", "empty"),
    ("ok", "short"), ("!!", "short"), (" a ", "short"),
    ("?!…—", "no_word"), ("--- ***", "no_word"),
    ("Tool called: bash ls -la", "telemetry"), ("  Tool result for bash: 3 files", "telemetry"),
    ("Step started: build", "telemetry"), ("Step completed: test", "telemetry"),
    ('{"plan": ["build", "test"]}', "telemetry"), ('[{"step": 1, "tool": "bash"}]', "telemetry"),
    ("lint", None), ("npm ci first", None), ("日本語", None), ("v20", None),
    ('{"engines": {"node": "20"}} pins node', None), ('{"name": "x"}', None),
    ("the tool called bash fails without a tty", None),
])
def test_the_salience_rule(text, reason):
    assert noise_reason(text) == reason
