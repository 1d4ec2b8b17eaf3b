"""The shared-file SQLite layout under a change of ``memory.languages`` (or of the tokenizing
rules, ``Analyzer.signature``): each shard re-derives its dedup keys and token index when it
is opened, once, and then answers as a directory written under the new languages from the
start would."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import apsw

from scopemem.core.ranking import Ranking
from scopemem.core.records import WriteCounts
from scopemem.languages import analyzer_for
from scopemem.stores.sqlite_shared import SharedSqliteStore, schema
from tests.conftest import FakeClock, fact
from tests.stores.shared_postings import CONTINUES, scope_documents

SCOPE = "org:slack:T1"
GERMAN = Ranking(analyzer_for(("german",)))


def store_at(directory: Path, clock: FakeClock, ranking: Ranking | None = None
             ) -> SharedSqliteStore:
    if ranking is None:
        return SharedSqliteStore(directory, clock=clock, synchronous="off")
    return SharedSqliteStore(directory, clock=clock, synchronous="off", ranking=ranking)


def shard_path(directory: Path) -> str:
    return str(directory / schema.shard_file_name(schema.shard_of(SCOPE)))


def query(path: str, statement: str) -> list[tuple[object, ...]]:
    conn = apsw.Connection(path)
    try:
        return [tuple(row) for row in conn.execute(statement)]
    finally:
        conn.close()


def documents(path: str) -> dict[int, set[str]]:
    conn = apsw.Connection(path)
    try:
        return scope_documents(conn, SCOPE)
    finally:
        conn.close()


def reindexed(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "re-derived" in r.getMessage()]


async def write_history(store: SharedSqliteStore, clock: FakeClock) -> None:
    """Records in two threads (so some continue their predecessor's thread), one with
    keywords, one superseded, one forgotten, and a second scope in another shard."""
    await store.write(SCOPE, [fact("Die Häuser am Fluss sind geschlossen"),
                              fact("Le café est fermé le lundi"),
                              fact("deploys run nightly from the build servers")])
    clock.advance(1000)
    other = "slack:C2/7"
    await store.write(SCOPE, [fact("the staging databases restart on sundays",
                                   source_thread_key=other, keywords=("Wohnungen", "backups")),
                              fact("an old note to forget", source_thread_key=other)])
    clock.advance(1000)
    await store.write(SCOPE, [fact("deploys run nightly from the release servers",
                                   supersedes=f"mem:{SCOPE}:3")])
    assert await store.forget(SCOPE, f"mem:{SCOPE}:5")
    await store.write("user:slack:U9", [fact("Die Kinder spielen im Garten")])


async def test_a_shard_opened_under_other_languages_is_reindexed_once(
        tmp_path: Path, clock: FakeClock, caplog):
    caplog.set_level(logging.INFO, logger="scopemem.stores.sqlite")
    data = tmp_path / "data"
    english = store_at(data, clock)
    await write_history(english, clock)
    # English stems Latin words its own way: "hauser" stays whole, "nightly" is "night".
    assert await english.retrieve(SCOPE, "haus", 5) == []
    await english.close()
    path = shard_path(data)
    before = query(path, "SELECT seq, id, status, use_count, text FROM records"
                         " WHERE scope_key = 'org:slack:T1' ORDER BY seq")
    held = documents(path)
    # The dedup keys as rules that folded only case made them (the café's accents kept).
    query(path, "UPDATE records SET norm = lower(text)")
    assert reindexed(caplog) == []

    german = store_at(data, clock, GERMAN)
    try:
        # A German inflection finds the record, and so do its words and the keywords' as
        # the German analyzer derives them.
        assert [r.text for r in await german.retrieve(SCOPE, "Haus", 5)] == [
            "Die Häuser am Fluss sind geschlossen"]
        assert [r.text for r in await german.retrieve(SCOPE, "nightly", 5)] == [
            "deploys run nightly from the release servers"]
        assert [r.text for r in await german.retrieve(SCOPE, "Wohnung", 5)] == [
            "the staging databases restart on sundays"]
        assert [r.text for r in await german.retrieve("user:slack:U9", "Kind", 5)] == [
            "Die Kinder spielen im Garten"]
        # The dedup keys were re-derived: the café restated in capitals without its accents
        # strengthens the old row.
        assert await german.write(SCOPE, [fact("LE CAFE EST FERME LE LUNDI")]) == \
            WriteCounts(deduped=1)
    finally:
        await german.close()
    # One line for the shard holding the scope, naming it and its rows (the other scope
    # has its own shard, and its own line).
    lines = reindexed(caplog)
    assert len(lines) == 2
    assert any(path in line and "of 6 records" in line and "unicode-2;german" in line
               for line in lines), lines
    assert query(path, "SELECT value FROM meta WHERE key = 'folding'") == [
        ("unicode-2;german",)]
    # Rows, ids and statuses as they were; the index holds the active rows, each with the
    # marker it had (the superseding record continues its thread, as before).
    after = query(path, "SELECT seq, id, status, text FROM records"
                        " WHERE scope_key = 'org:slack:T1' ORDER BY seq")
    assert [row[:3] for row in after] == [row[:3] for row in before]
    now = documents(path)
    assert set(now) == set(held) == {1, 2, 4, 6}
    assert {seq for seq, terms in now.items() if CONTINUES in terms} == \
        {seq for seq, terms in held.items() if CONTINUES in terms} == {2}
    assert "haus" in now[1] and "hauser" in held[1]

    # Once only: a second open finds the shards current and writes nothing.
    again = store_at(data, clock, GERMAN)
    try:
        assert len(await again.retrieve(SCOPE, "häuser", 5)) == 1
    finally:
        await again.close()
    assert len(reindexed(caplog)) == 2


async def test_a_reindexed_directory_answers_as_one_written_under_its_languages(
        tmp_path: Path, caplog):
    caplog.set_level(logging.INFO, logger="scopemem.stores.sqlite")
    moved_clock, fresh_clock = FakeClock(), FakeClock()
    moved = store_at(tmp_path / "moved", moved_clock)
    await write_history(moved, moved_clock)
    await moved.close()
    moved = store_at(tmp_path / "moved", moved_clock, GERMAN)
    fresh = store_at(tmp_path / "fresh", fresh_clock, GERMAN)
    try:
        await write_history(fresh, fresh_clock)
        for text in ("Häuser Fluss", "deploys nightly servers", "Wohnung backups",
                     "servers databases Häuser", "geschlossen lundi", "run"):
            found = [[r.id for r in await store.retrieve(SCOPE, text, 10)]
                     for store in (moved, fresh)]
            assert found[0] == found[1], text
            assert found[0], text
        assert [r.id for r in await moved.list(SCOPE, 10)] == \
            [r.id for r in await fresh.list(SCOPE, 10)]
    finally:
        await moved.close()
        await fresh.close()
    assert documents(shard_path(tmp_path / "moved")) == documents(shard_path(tmp_path / "fresh"))
    assert query(shard_path(tmp_path / "moved"), "SELECT seq, norm, tokens FROM records") == \
        query(shard_path(tmp_path / "fresh"), "SELECT seq, norm, tokens FROM records")


async def test_two_stores_opening_a_shard_at_once_reindex_it_once(
        tmp_path: Path, clock: FakeClock, caplog):
    caplog.set_level(logging.INFO, logger="scopemem.stores.sqlite")
    data = tmp_path / "data"
    english = store_at(data, clock)
    await english.write(SCOPE, [fact(f"Die Häuser Nummer {n} am Fluss") for n in range(40)])
    await english.close()
    # Two stores (each its own connections and threads, as two processes would have).
    first, second = store_at(data, clock, GERMAN), store_at(data, clock, GERMAN)
    try:
        found = await asyncio.gather(*(store.retrieve(SCOPE, "Haus", 50)
                                       for store in (first, second)))
        assert [len(hits) for hits in found] == [40, 40]
    finally:
        await first.close()
        await second.close()
    assert len(reindexed(caplog)) == 1


async def test_a_shard_written_under_other_languages_is_a_warning_naming_both(
        tmp_path: Path, clock: FakeClock, caplog):
    """A process opening a directory another process writes under other languages (an
    operator's command whose configuration leaves ``memory.languages`` out, next to a
    worker configured for two) re-derives the shard for every process using it: a warning,
    which a command line shows, naming both signatures and the setting, where it was an
    INFO line no command line shows."""
    data = tmp_path / "data"
    german = store_at(data, clock, GERMAN)
    await german.write(SCOPE, [fact("Die Häuser am Fluss sind geschlossen")])
    await german.close()
    caplog.set_level(logging.INFO, logger="scopemem.stores.sqlite")
    english = store_at(data, clock)
    try:
        assert await english.retrieve(SCOPE, "Häuser", 5)
    finally:
        await english.close()
    [line] = [r for r in caplog.records if "re-derived" in r.getMessage()]
    assert line.levelno == logging.WARNING
    message = line.getMessage()
    assert shard_path(data) in message and "of 1 records" in message
    assert "written under unicode-2;german" in message
    assert "memory.languages" in message
