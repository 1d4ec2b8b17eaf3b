"""Every listed language stems its own words, on every store: with English, German and
Spanish listed, an inflected German noun or Spanish verb finds its record whichever form the
record holds, English records rank for English briefs as under English alone, and a shared
directory indexed under the earlier rule (the first listed language of a script stems it) is
re-indexed when opened."""

from __future__ import annotations

from pathlib import Path

import attrs

from scopemem.core.ranking import Ranking
from scopemem.core.words import Analyzer
from scopemem.languages import analyzer_for
from tests.conftest import FakeClock, fact
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


async def test_english_ranks_as_under_english_alone(make_store: MakeStore):
    english = await make_store(ranking=ENGLISH)
    mixed = await make_store(ranking=MIXED)
    for store in (english, mixed):
        await store.write(SCOPE, [fact(text) for text in ENGLISH_RECORDS])
    for brief in ENGLISH_BRIEFS:
        got = await texts(mixed, brief)
        assert got, brief
        assert got == await texts(english, brief), brief


async def test_a_directory_indexed_by_the_first_language_alone_is_reindexed(
        tmp_path: Path, clock: FakeClock, make):
    # The earlier rule under the same languages: English alone stemmed Latin words.
    first_only: Analyzer = attrs.evolve(MIXED.analyzer,
                                         stemmers=ENGLISH.analyzer.stemmers, stem_rule="")
    before = make(ranking=Ranking(first_only))
    record = "Die Lizenzprüfungen laufen jeden Montag"
    await before.write(SCOPE, [fact(record)])
    assert await before.retrieve(SCOPE, "Lizenzprüfung", 10) == []
    await before.close()
    after = make(ranking=MIXED)
    assert [r.text for r in await after.retrieve(SCOPE, "Lizenzprüfung", 10)] == [record]


def test_one_language_keeps_its_signature_and_several_of_one_script_change_it():
    assert ENGLISH.analyzer.signature == "unicode-2;english"
    assert analyzer_for(("english", "russian")).signature == "unicode-2;english+russian"
    assert MIXED.analyzer.signature == "unicode-2;english+german+spanish;shortest-stem"
