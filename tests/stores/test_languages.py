"""Every listed language stems its own words, on every store: with English, German and
Spanish listed, an inflected German noun, Spanish noun or Spanish verb finds its record
whichever form the record holds (even where the languages' stemmers reduce the forms
differently), a word weighs once however many of its stems a record holds, English records
rank for English briefs as under English alone, and a shared directory indexed under an
earlier rule is re-indexed when opened."""

from __future__ import annotations

import random
from pathlib import Path

import attrs
import pytest

from scopemem.core.ranking import Ranking
from scopemem.core.records import Candidate, Kind
from scopemem.core.words import Analyzer
from scopemem.languages import analyzer_for
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.sqlite_shared import SharedSqliteStore
from tests.conftest import FakeClock, fact
from tests.stores import pg
from tests.stores.conftest import MakeStore

SCOPE = "org:slack:T1"
ENGLISH = Ranking(analyzer_for(("english",)))
MIXED = Ranking(analyzer_for(("english", "german", "spanish")))

ENGLISH_RECORDS = (
    "The nightly deploys run from the build servers in Frankfurt",
    "Grafana alerts for the payments service go to the on-call pager",
    "Flaky integration tests are quarantined before the release branch is cut",
    "The staging database restarts every Sunday at three",
    "Use the vault for staging credentials, never the wiki",
    "Migrations must be reviewed by the data team before they are merged",
    "The billing service retries failed webhooks five times",
    "Docker images are built once and promoted between environments",
)
ENGLISH_BRIEFS = (
    "why did the nightly deploy fail on the build server",
    "where are the staging credentials",
    "the payments alerts are paging the wrong person",
    "flaky tests block the release",
    "reviewing database migrations",
    "webhook retries in billing",
    "promote the docker image to production",
)


async def texts(store, query: str) -> list[str]:
    return [record.text for record in await store.retrieve(SCOPE, query, 10)]


async def test_an_inflected_german_noun_finds_its_record_in_either_direction(
        make_store: MakeStore):
    store = await make_store(ranking=MIXED)
    plural = "Die Lizenzprüfungen laufen jeden Montag"
    await store.write(SCOPE, [fact(plural), fact("Das Mittagessen ist um zwölf")])
    other = "user:slack:U1"
    singular = "Eine Lizenzprüfung dauert zwei Tage"
    await store.write(other, [fact(singular), fact("Das Mittagessen ist um zwölf")])
    assert await texts(store, "Lizenzprüfung") == [plural]
    assert [r.text for r in await store.retrieve(other, "Lizenzprüfungen", 10)] == [singular]


async def test_an_inflected_spanish_verb_finds_its_record(make_store: MakeStore):
    store = await make_store(ranking=MIXED)
    record = "Desplegar la aplicación requiere la aprobación del equipo"
    await store.write(SCOPE, [fact(record), fact("El almuerzo es a las doce")])
    # Spanish's stemmer makes "desplegamos" and "desplegó" "despleg", as "desplegar".
    assert await texts(store, "desplegamos ayer") == [record]
    assert await texts(store, "¿quién desplegó?") == [record]


async def test_a_plural_and_its_singular_find_each_other_where_the_stemmers_disagree(
        make_store: MakeStore):
    # English's stemmer makes "zertifikate" "zertifik" and German's "zertifikat";
    # "datenbankmigration" is "datenbankmigr" under English's and "datenbankmigration" under
    # German's; "prueba" is "pruba" under German's, "pruebas" "prueb" under Spanish's.
    store = await make_store(ranking=MIXED)
    pairs = (("Zertifikate", "Zertifikat"), ("Datenbankmigrationen", "Datenbankmigration"),
             ("pruebas", "prueba"), ("tareas", "tarea"))
    for number, (plural, singular) in enumerate(pairs):
        scope = f"user:slack:U{number}"
        await store.write(scope, [fact(f"Die {plural} liegen im Tresor"),
                                  fact("Das Mittagessen ist um zwölf")])
        other = f"user:slack:V{number}"
        await store.write(other, [fact(f"Die {singular} liegt im Tresor"),
                                  fact("Das Mittagessen ist um zwölf")])
        assert [r.text for r in await store.retrieve(scope, singular, 10)] == [
            f"Die {plural} liegen im Tresor"], singular
        assert [r.text for r in await store.retrieve(other, plural, 10)] == [
            f"Die {singular} liegt im Tresor"], plural


async def test_a_word_weighs_once_however_many_of_its_stems_a_record_holds(
        make_store: MakeStore):
    store = await make_store(ranking=MIXED)
    # "Zertifikate" holds both of the word's stems (English's "zertifik", German's
    # "zertifikat"), "Zertifikat" one; the second record also holds "erneuern".
    both_stems = "Zertifikate: jedes Zertifikat liegt im Tresor"
    both_words = "Ein Zertifikat erneuern wir jeden Monat"
    await store.write(SCOPE, [fact(both_stems), fact(both_words),
                              fact("Das Mittagessen ist um zwölf")])
    hits = await store.search(SCOPE, "Zertifikate erneuern", 10, bump=False)
    assert [hit.record.text for hit in hits] == [both_words, both_stems]
    assert hits[0].match == pytest.approx(1.0)
    assert hits[1].match < 0.75


async def test_english_ranks_as_under_english_alone(make_store: MakeStore):
    english = await make_store(ranking=ENGLISH)
    mixed = await make_store(ranking=MIXED)
    for store in (english, mixed):
        await store.write(SCOPE, [fact(text) for text in ENGLISH_RECORDS])
    for brief in ENGLISH_BRIEFS:
        got = await texts(mixed, brief)
        assert got, brief
        assert got == await texts(english, brief), brief


def shortest_stem() -> Analyzer:
    """An earlier rule under the same languages: a word's term its shortest stem."""
    stems = MIXED.analyzer.stemmers["Latin"]

    def shortest(word: str) -> str:
        return min((stem(word) for stem in stems), key=len)

    return attrs.evolve(MIXED.analyzer, stemmers={"Latin": (shortest,)},
                        stem_rule="shortest-stem")


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize("earlier", ["first language alone", "shortest stem"])
async def test_a_store_indexed_under_an_earlier_rule_is_reindexed(
        tmp_path: Path, clock: FakeClock, backend: str, earlier: str):
    analyzer = (shortest_stem() if earlier == "shortest stem" else
                attrs.evolve(MIXED.analyzer, stemmers=ENGLISH.analyzer.stemmers, stem_rule=""))
    schema = None
    if backend == "postgres":
        pg.require()
        schema = pg.new_schema()

    def opened(ranking: Ranking):  # type: ignore[no-untyped-def]
        if schema is not None:
            return pg.make(schema, clock=clock, ranking=ranking)
        return SharedSqliteStore(tmp_path / "data", clock=clock, synchronous="off",
                                 ranking=ranking)

    record = "Die Zertifikate liegen im Tresor"
    try:
        before = opened(Ranking(analyzer))
        await before.write(SCOPE, [fact(record)])
        # English alone keeps "zertifikat" whole; the shortest stem of "zertifikate" is
        # English's "zertifik".
        assert await before.retrieve(SCOPE, "Zertifikat", 10) == []
        await before.close()
        after = opened(MIXED)
        assert [r.text for r in await after.retrieve(SCOPE, "Zertifikat", 10)] == [record]
        await after.close()
    finally:
        if schema is not None:
            pg.drop_schemas(schema)


def test_one_language_keeps_its_signature_and_several_of_one_script_change_it():
    assert ENGLISH.analyzer.signature == "unicode-2;english"
    assert analyzer_for(("english", "russian")).signature == "unicode-2;english+russian"
    assert MIXED.analyzer.signature == "unicode-2;english+german+spanish;every-stem"


# Words each stemmed two or three ways under English, German and Spanish, in several forms.
FORMS = (("Zertifikate", "Zertifikat"), ("Datenbankmigrationen", "Datenbankmigration"),
         ("pruebas", "prueba"), ("tareas", "tarea"), ("desplegamos", "desplegar"),
         ("servers", "server"), ("deploying", "deploys"), ("Lizenzprüfungen",))
QUERIES = ("Zertifikat", "Zertifikate", "Zertifikat pruebas", "Datenbankmigration tarea",
           "desplegar servers deploys", "prueba tareas Lizenzprüfung tkaa",
           " ".join([form for forms in FORMS for form in forms]
                    + [f"tk{chr(97 + n % 26)}a" for n in range(0, 60, 2)]))


@pytest.fixture(params=["sqlite", "sqlite-copies", "postgres", "postgres-copies"])
def kind(request: pytest.FixtureRequest) -> str:
    if request.param.startswith("postgres"):
        pg.require()
    return request.param


async def test_every_store_ranks_many_stemmed_words_alike(tmp_path: Path, clock: FakeClock,
                                                          kind: str):
    """More records hold a word than the candidate cap takes (the weighing prunes, over
    postings, arrays and rows), each word in either of its forms."""
    rng = random.Random(7)
    memory = InMemoryStore(cap=1000, clock=clock, ranking=MIXED)
    schema = None
    copies: dict[str, int] = ({"cache_min_postings": 0} if kind.endswith("copies")
                              else {"postings_cache": 0})
    if kind.startswith("postgres"):
        schema = pg.new_schema()
        other = pg.make(schema, cap=1000, clock=clock, ranking=MIXED, **copies)
        other._cache.interval = 0
    else:
        other = SharedSqliteStore(tmp_path / "data", cap=1000, clock=clock, synchronous="off",
                                  ranking=MIXED, **copies)
        other._copies.interval = 0
    try:
        for scope, size in ((SCOPE, 240), ("user:slack:U1", 30)):
            batch = [Candidate(kind=Kind.FACT, text=" ".join(
                [rng.choice(forms) for forms in rng.sample(FORMS, rng.randint(1, 4))]
                + [f"tk{chr(97 + n % 26)}{chr(97 + n // 26)}"]),
                source_thread_key=f"slack:C1/{n % 3}") for n in range(size)]
            for store in (memory, other):
                await store.write(scope, batch)
        if kind == "sqlite-copies":
            await other._copies.settled()
        if kind == "postgres-copies":
            await other._cache.settled()
        for scope in (SCOPE, "user:slack:U1"):
            for query in QUERIES:
                for limit in (1, 8, 20):
                    expected = await memory.search(scope, query, limit, bump=False)
                    assert expected
                    assert await other.search(scope, query, limit, bump=False) == expected
    finally:
        await memory.close()
        await other.close()
        if schema is not None:
            pg.drop_schemas(schema)
