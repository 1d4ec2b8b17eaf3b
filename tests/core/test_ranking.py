"""The weighted ranking (core.ranking): rare words outrank common ones, function words and
fragments find nothing, inflections and other languages are found, and the match stays in
[0, 1] whatever the scope."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scopemem.core import engine
from scopemem.core.ranking import SEED, Ranking, query_terms, wire_query
from scopemem.core.records import MAX_QUERY_CHARS, Kind, Record
from scopemem.core.scoring import score_of
from scopemem.languages import analyzer_for, available_languages

ORG = "org:acme"
NOW = 1_790_000_000_000
ENGLISH = Ranking(analyzer_for(("english",)))


def rec(seq: int, text: str, thread: str | None = None, touched: int = NOW) -> Record:
    return Record(id=f"mem:{ORG}:{seq}", scope_key=ORG, kind=Kind.FACT, text=text,
                  source_thread_key=thread or f"t{seq}", created_at=touched)


def ranked(records, query, ranking=ENGLISH, limit=10):
    return [record.text for record, _match in
            engine.rank_records(records, query, limit, NOW, ranking)]


def test_a_rare_word_outranks_a_common_one():
    common = [rec(n, f"the deploy step {n}") for n in range(10, 18)]
    rare = rec(1, "grafana alerts go to the pager")
    newest_common = rec(30, "deploy grafana later")
    records = [*common, rare, newest_common]
    # Both words once each: the record holding the rare word comes first among the rest.
    got = ranked(records, "deploy grafana")
    assert got[0] == "deploy grafana later"
    assert got[1] == "grafana alerts go to the pager"
    # The seed's plain share counts the two alike: recency (ties to the newer) decides.
    seed = ranked(records, "deploy grafana", SEED)
    assert seed[0] == "deploy grafana later"
    assert seed[1] == "the deploy step 17"


def test_function_words_alone_find_nothing_and_never_pass_the_gate():
    records = [rec(1, "what is the plan for it"), rec(2, "vpn first")]
    assert ranked(records, "what is it") == []
    assert ranked(records, "what is the vpn") == ["vpn first"]
    # Under the seed's ranking every word counts.
    assert ranked(records, "what is it", SEED) == ["what is the plan for it"]


@pytest.mark.parametrize(("languages", "text", "query"), [
    (("english",), "The deploys failed twice", "deploying fails"),
    (("german",), "Die Häuser am Fluss sind geschlossen", "haus fluss"),
    (("french",), "Les déploiements échouent le lundi", "DEPLOIEMENT"),
    (("spanish",), "Las migraciones fallaron anoche", "migración"),
    (("portuguese",), "Os servidores caíram ontem", "servidor caiu"),
    (("italian",), "I rilasci sono bloccati", "rilascio bloccato"),
    (("turkish",), "Sunucular İstanbul ofisinde", "sunucu istanbul"),
    (("russian",), "Новые серверы стоят в подвале", "новый сервер"),
    (("english", "german", "spanish"), "Die Lizenzprüfungen laufen", "Lizenzprüfung"),
    (("english", "german", "spanish"), "Eine Lizenzprüfung dauert", "Lizenzprüfungen"),
    (("english", "german", "spanish"), "Desplegar requiere aprobación", "desplegamos"),
    (("english", "german", "spanish"), "Die Zertifikate liegen im Tresor", "Zertifikat"),
    (("english", "german", "spanish"), "Das Zertifikat liegt im Tresor", "Zertifikate"),
    (("english", "german", "spanish"), "Datenbankmigrationen laufen", "Datenbankmigration"),
    (("english", "german", "spanish"), "Las pruebas fallaron", "prueba"),
    (("english", "german", "spanish"), "The deploys failed twice", "deploying fails"),
])
def test_an_inflected_query_finds_the_record_in_every_language(languages, text, query):
    ranking = Ranking(analyzer_for(languages))
    records = [rec(1, text), rec(2, "unrelated lunch note")]
    assert ranked(records, query, ranking) == [text]


def test_a_word_of_several_languages_is_one_term_and_weighs_once():
    mixed = Ranking(analyzer_for(("english", "german", "spanish")))
    # English keeps "lizenzprufungen" whole, German makes it "lizenzpruf", Spanish
    # "lizenzprufung": the word is one term standing for its three stems.
    terms = query_terms("Lizenzprüfungen", mixed.analyzer)
    assert terms.stems == ("lizenzprufungen", "lizenzpruf", "lizenzprufung")
    assert len(terms.terms) == len(terms.prefilter) == 1
    # The record holds two of the word's stems ("lizenzprufung", "lizenzpruf"): the word
    # still weighs once, as much as "Mittagessen".
    records = [rec(1, "Eine Lizenzprüfung dauert zwei Tage"), rec(2, "Mittagessen um zwölf")]
    got = engine.rank_records(records, "Lizenzprüfungen Mittagessen", 10, NOW, mixed)
    assert [match for _record, match in got] == [0.5, 0.5]


@pytest.mark.parametrize(("language", "words"), [
    ("english", "the and of"), ("german", "und der die"), ("french", "le et des"),
    ("spanish", "el los las"), ("portuguese", "os das não"), ("italian", "il della che"),
    ("turkish", "ve bir için"), ("russian", "и в не"),
])
def test_function_words_are_dropped_in_every_language(language, words):
    analyzer = analyzer_for((language,))
    assert analyzer.content_words(words) == []
    assert analyzer.content_words(f"{words} server") == ["server"]


def test_function_words_never_reach_the_prefilter():
    # A brief as people write one: its function words neither gate nor weigh.
    brief = ("What is the status of the deployment for the payments service and why did it "
             "fail again yesterday? Was it because of the new config that we pushed?")
    terms = query_terms(brief, ENGLISH.analyzer)
    stopwords = ENGLISH.analyzer.stopwords
    assert terms.prefilter and not stopwords & set(terms.prefilter)
    assert not stopwords & set(terms.terms)
    assert set(terms.prefilter) == set(terms.terms)  # a short brief: every term gates


def test_the_languages_are_the_ones_both_libraries_have():
    for language in ("english", "german", "french", "spanish", "portuguese", "italian",
                     "turkish", "russian"):
        assert language in available_languages()
    with pytest.raises(ValueError, match="unknown language 'klingon'"):
        analyzer_for(("klingon",))


def test_a_reply_is_found_through_the_question_before_it():
    question = rec(1, "Where do we keep the staging credentials?", thread="t")
    answer = rec(2, "In the vault, under staging", thread="t")
    other = rec(3, "The vault is sealed on sundays", thread="u")
    got = engine.rank_records([question, answer, other], "staging credentials vault", 10,
                              NOW, ENGLISH)
    matches = {record.text: match for record, match in got}
    # The answer holds "staging" and "vault" and is credited with its question's
    # "credentials".
    assert matches[answer.text] > matches[other.text]
    assert min(matches.values()) >= 0.0 and max(matches.values()) <= 1.0


def test_a_word_the_predecessor_also_holds_counts_once():
    # The credit is for the query words a predecessor holds and the record lacks: a record
    # repeating its predecessor's words gains nothing from it, and one whose predecessor
    # holds the word it lacks ranks above it.
    records = [rec(1, "grafana dashboards", thread="t"),
               rec(2, "grafana dashboards again", thread="t"),
               rec(3, "provisioned from infra", thread="u"),
               rec(4, "grafana only", thread="u")]
    got = engine.rank_records(records, "grafana dashboards provisioned", 10, NOW, ENGLISH)
    matches = {record.text: match for record, match in got}
    assert matches["grafana dashboards again"] == matches["grafana dashboards"]
    assert [record.text for record, _match in got][0] == "grafana only"


def pasted_log(line: str) -> str:
    """``line`` among forty routine lines that repeat their words and vary their numbers."""
    routine = [f"[10:{n + 10}:{n + 20}] INFO {('cache worker', 'http client')[n % 2]} "
               f"step {n} took {n * 7 + 100} ms" for n in range(40)]
    routine.insert(25, line)
    return "this started failing, can you look?\n" + "\n".join(routine)


def test_a_pasted_log_finds_the_line_that_matters_not_its_routine():
    # A few records hold two of the words every routine line of the log repeats; the
    # lesson holds the one word the line that matters says once. Weighed once each, the two
    # routine words would outweigh it.
    teams = ("red", "blue", "green", "amber", "violet", "teal")
    routine = [rec(n, f"The {('cache worker', 'http client')[n % 2]} is owned by {team}")
               for n, team in enumerate(teams, start=1)]
    filler = [rec(n, f"The billing export runs nightly, batch {chr(97 + n)}")
              for n in range(7, 26)]
    lesson = rec(40, "Secrets are encrypted with sops and the age key from the vault")
    brief = pasted_log("sops: failed to decrypt the file")
    assert ranked([*routine, *filler, lesson], brief)[0] == lesson.text
    terms = query_terms(brief, ENGLISH.analyzer)
    uses = dict(zip(terms.terms, terms.uses, strict=True))
    assert (uses["cach"], uses["sop"]) == (20, 1)


def test_a_long_brief_gates_by_its_words_before_its_numbers():
    # "sops" stems to "sop", as short as the log's durations: the word still lets its
    # record in, though the brief has more than 24 terms.
    terms = query_terms(pasted_log("sops: failed to decrypt"), ENGLISH.analyzer)
    assert len(terms.terms) > 24
    assert "sop" in terms.prefilter
    numbers = [term.isdigit() for term in terms.prefilter]
    assert numbers == sorted(numbers)


WORDS = st.sampled_from(["deploy", "vault", "the", "staging", "grafana", "lunch", "a",
                         "migrations", "ci", "flaky", "tests", "café", "数据库"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(WORDS, min_size=1, max_size=6), st.integers(0, 3),
                          st.integers(0, 20 * 86_400_000)), max_size=25),
       st.lists(WORDS, max_size=8), st.integers(1, 12))
def test_matches_stay_in_unit_range_and_order_follows_the_score(rows, query, limit):
    records = [rec(n, " ".join(words), thread=f"t{thread}", touched=NOW - age)
               for n, (words, thread, age) in enumerate(rows, start=1)]
    got = engine.rank_records(records, " ".join(query), limit, NOW, ENGLISH)
    assert len(got) <= limit
    scores = [score_of(match, record.last_touched, NOW) for record, match in got]
    assert all(0.0 <= match <= 1.0 for _record, match in got)
    assert scores == sorted(scores, reverse=True)
    # The answer never depends on the order a store hands the records in.
    assert engine.rank_records(list(reversed(records)), " ".join(query), limit, NOW,
                               ENGLISH) == got


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=400))
def test_a_long_query_goes_on_the_wire_and_means_the_same(parts):
    query = " ".join(parts) * 3
    sent = wire_query(query, ENGLISH.analyzer)
    assert len(sent) <= MAX_QUERY_CHARS
    assert engine.query_terms(sent, ENGLISH.analyzer) == engine.query_terms(
        query, ENGLISH.analyzer)


def test_seed_ranking_is_the_plain_share():
    records = [rec(1, "deploy grafana"), rec(2, "deploy only")]
    got = engine.rank_records(records, "deploy grafana", 10, NOW, SEED)
    assert [(r.text, m) for r, m in got] == [("deploy grafana", 1.0), ("deploy only", 0.5)]
    assert attrs.evolve(SEED, weighted=True).context_weight == 0.75
