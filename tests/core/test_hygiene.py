"""Write hygiene: every candidate fits the record contract the worker's validator checks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scopemem.core.hygiene import (
    NO_THREAD_KEY,
    cut_text,
    fit_candidate,
    fit_keywords,
)
from scopemem.core.records import (
    MAX_KEYWORD_CHARS,
    MAX_KEYWORDS,
    MAX_TEXT_CHARS,
    Candidate,
    Kind,
    to_wire,
)
from scopemem.worker_aiohttp.validation import parse_candidate


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
    thread_key=st.text(_ANY, max_size=20),
    run_id=st.one_of(st.none(), st.text(_ANY, max_size=10)),
    kind=st.sampled_from(list(Kind)),
)
def test_whatever_a_producer_offers_the_worker_accepts_once_fitted(text, keywords, thread_key,
                                                                   run_id, kind):
    candidate = Candidate(kind=kind, text=text, source_thread_key=thread_key,
                          source_run_id=run_id, keywords=keywords)
    fitted = fit_candidate(candidate)
    # The server's own validator, on the client's own wire form: one definition of the caps.
    parsed = parse_candidate(to_wire(fitted), "records[0]")
    assert parsed == fitted
    assert len(fitted.text) <= MAX_TEXT_CHARS
    assert all(len(keyword) <= MAX_KEYWORD_CHARS for keyword in fitted.keywords or ())
    assert fitted.text.encode("utf-8")  # never a lone surrogate
    assert fit_candidate(fitted) == fitted
