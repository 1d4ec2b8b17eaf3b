"""Secrets never reach a store, a prompt block or a log line, whatever the store.

Every corpus secret (``tests/secret_corpus.py``) is written through each store of the
contract suite (memory, SQLite, a live worker in front of SQLite, PostgreSQL), with the
secret also among its keywords; then every file the stores left behind (the database, its
``-wal`` and ``-shm``; for PostgreSQL every column of every row) is read back byte for
byte, and the records, the prompt block and every log record are searched for the secret
and its long alphanumeric runs, as written and lowercased.
"""

from __future__ import annotations

import logging
from pathlib import Path

from scopemem import Memory, MemoryConfig, Request
from scopemem.core.records import MAX_BATCH, MAX_KEYWORD_CHARS
from tests.conftest import fact
from tests.secret_corpus import CORPUS, FORMATS

ORG, CHANNEL = "org:acme", "channel:slack:C1"
SCOPES = (ORG, CHANNEL)  # a list call answers at most 50 records: one scope per batch


def _needles(secret) -> list[bytes]:
    words = {secret.raw, *secret.fragments}
    return sorted({form.encode() for word in words for form in (word, word.lower())})


def _leaks(haystack: bytes) -> list[str]:
    return [secret.kind for secret in CORPUS
            if any(needle in haystack for needle in _needles(secret))]


def _grep_files(directory: Path) -> list[Path]:
    files = [path for path in directory.rglob("*") if path.is_file()]
    for path in files:
        assert _leaks(path.read_bytes()) == [], path
    return files


def _postgres_rows(schema: str) -> bytes:
    import psycopg

    from tests.stores import pg

    with psycopg.connect(pg.dsn()) as conn:
        rows = conn.execute(f'SELECT r::text FROM "{schema}".records r').fetchall()
    return "\n".join(text for (text,) in rows).encode()


def _candidates():
    for secret in CORPUS:
        keywords = ["credentials", secret.kind]
        if len(secret.raw) <= MAX_KEYWORD_CHARS:
            # As an extractor might give them: the value alone, and lowercased.
            keywords += [secret.raw, secret.raw.lower()]
        yield fact(secret.text, keywords=tuple(keywords))


def test_the_corpus_is_large_and_varied():
    assert len(CORPUS) >= 60 and len(FORMATS) >= 25


async def test_no_secret_reaches_a_stored_file_a_record_or_a_log(make_store, tmp_path: Path,
                                                                caplog, request):
    caplog.set_level(logging.DEBUG)
    store = await make_store()
    candidates = list(_candidates())
    assert len(candidates) <= MAX_BATCH * len(SCOPES)
    for scope, start in zip(SCOPES, range(0, len(candidates), MAX_BATCH), strict=False):
        await store.write(scope, candidates[start:start + MAX_BATCH])
    records = [record for scope in SCOPES for record in await store.list(scope, MAX_BATCH)]
    assert len(records) == len(CORPUS)
    stored = "\n".join(f"{r.text}\n{' '.join(r.keywords or ())}" for r in records)
    assert "[REDACTED:" in stored
    assert _leaks(stored.encode()) == []
    memory = Memory(MemoryConfig(enabled=True, organization="acme", store="memory"), store)
    block = await memory.context_block(
        Request(text="which token key secret password credentials does the deploy use",
                user_id="slack:UA", channel_id="slack:C1"))
    assert block and "[REDACTED:" in block
    assert _leaks(block.encode()) == []
    # Every file the store keeps, while it is open (the -wal and -shm are there) and after.
    open_files = _grep_files(tmp_path)
    kind = request.node.callspec.params["make_store"]
    if kind == "postgres":
        # The server's files are not ours to read: every column of every row instead.
        assert _leaks(_postgres_rows(store.schema)) == []
    elif kind != "memory":
        assert {path.name.rsplit(".", 1)[-1] for path in open_files} >= {"db", "db-wal"}
    await store.close()
    _grep_files(tmp_path)
    logged = "\n".join(f"{r.getMessage()} {r.args!r}" for r in caplog.records)
    assert _leaks(logged.encode()) == []


async def test_keywords_are_redacted_in_the_context_of_the_text(store):
    await store.write(ORG, [
        fact("the staging database uses DB_PASS=hunter2xyzzy9",
             keywords=("database", "db_pass", "hunter2xyzzy9", "HUNTER2XYZZY9")),
        fact("ask the platform team for access", keywords=("password=", "s3cr3tv4lue99")),
        fact("the deploy bot signs in", keywords=("password=correcthorse42",)),
    ])
    records = await store.list(ORG, 10)
    words = " ".join(" ".join(record.keywords or ()) for record in records).lower()
    assert "database" in words and "platform" not in words
    for value in ("hunter2xyzzy9", "s3cr3tv4lue99", "correcthorse42"):
        assert value not in words


SENDABLE = [secret for secret in CORPUS if "\x00" not in secret.text]


async def test_the_worker_redacts_what_any_client_posts_to_write(tmp_path: Path, clock):
    """A client other than ``WorkerStore`` (curl, another language's client) sends the
    corpus as it is: the worker's own store redacts it. (A secret split by a NUL is not
    sent: the wire refuses a NUL with a 400, see tests/worker/test_routes.py.)"""
    import aiohttp

    from scopemem.stores.sqlite_shared import SharedSqliteStore
    from scopemem.worker_aiohttp.app import create_app, running

    backing = SharedSqliteStore(tmp_path / "worker", clock=clock)
    records = [{"kind": "fact", "text": secret.text, "sourceThreadKey": "curl",
                "keywords": [secret.kind, secret.raw[:MAX_KEYWORD_CHARS]]}
               for secret in SENDABLE]
    async with running(create_app(backing, "t0ken")) as url, aiohttp.ClientSession() as http:
        for scope, start in zip(SCOPES, range(0, len(records), MAX_BATCH), strict=False):
            async with http.post(f"{url}/write", headers={"Authorization": "Bearer t0ken"},
                                 json={"scopeKey": scope,
                                       "records": records[start:start + MAX_BATCH]}) as reply:
                assert reply.status == 200, await reply.text()
        stored = [record for scope in SCOPES for record in await backing.list(scope, 50)]
        assert len(stored) == len(SENDABLE)
        _grep_files(tmp_path)
    _grep_files(tmp_path)
