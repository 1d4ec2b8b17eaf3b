"""The raw FTS5 baseline the benchmarks hold the SQLite store to: a database per scope with
the rows and an FTS5 index of the engine's terms, written and queried with plain SQL.

It is the shape of the retired file layout's scope files (``docs/storage.md``), kept here
as a baseline so figures compare across versions: ``RAW_FTS_SQL`` is the candidate query a
retrieval issued before weighted ranking, ``raw_insert`` the rows a write batch inserts,
written directly in one transaction. No eviction, no dedup, no use counts: the least a
store could do.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from typing import Any

from scopemem.core.records import Candidate
from scopemem.core.scopes import memory_id
from scopemem.core.text import normalize_text
from scopemem.stores.base import DEFAULT_RANKING
from scopemem.stores.shared.tokens import index_tokens

ANALYZER = DEFAULT_RANKING.analyzer
RECORD_COLUMNS = ("seq, id, scope_key, kind, text, keywords, source_thread_key, source_run_id,"
                  " created_at, last_used_at, use_count, confidence, supersedes, restates,"
                  " status, source")
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS records (
        seq INTEGER PRIMARY KEY, id TEXT NOT NULL, scope_key TEXT NOT NULL,
        kind TEXT NOT NULL, text TEXT NOT NULL, norm TEXT NOT NULL,
        keywords TEXT NOT NULL DEFAULT '[]', source_thread_key TEXT NOT NULL,
        source_run_id TEXT, created_at INTEGER NOT NULL, last_used_at INTEGER,
        use_count INTEGER NOT NULL DEFAULT 0, confidence, supersedes TEXT, restates TEXT,
        status TEXT NOT NULL DEFAULT 'active', source TEXT NOT NULL DEFAULT 'reflection')""",
    "CREATE INDEX IF NOT EXISTS records_active_by_seq ON records (seq DESC)"
    " WHERE status = 'active'",
    "CREATE VIRTUAL TABLE IF NOT EXISTS records_fts USING fts5(tokens, tokenize = 'ascii')",
)
# A hit's indexed terms, read from the FTS5 content table by its integer key.
HIT_TOKENS = "(SELECT c0 FROM records_fts_content WHERE records_fts_content.id = hit)"
# The raw FTS5 query a retrieval is measured against: the best ``cap`` rows for the query's
# prefilter terms by FTS5's own bm25, read in full with their indexed terms.
RAW_FTS_SQL = (
    f"SELECT {RECORD_COLUMNS}, {HIT_TOKENS} FROM ("
    "SELECT rowid AS hit, bm25(records_fts) AS score FROM records_fts"
    " WHERE records_fts MATCH ? ORDER BY score, rowid DESC LIMIT ?"
    ") CROSS JOIN records ON seq = hit WHERE status = 'active'"
)


def raw_connection(path: str, synchronous: str) -> Any:
    """A connection to the baseline database at ``path`` (made, in WAL mode, if new)."""
    import apsw

    conn = apsw.Connection(path)
    conn.set_busy_timeout(5000)
    conn.execute("PRAGMA journal_mode = WAL").fetchall()
    conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    for statement in SCHEMA:
        conn.execute(statement)
    return conn


def raw_path(root: str, scope_key: str) -> str:
    """The baseline database of ``scope_key`` under ``root``."""
    return os.path.join(root, hashlib.sha256(scope_key.encode()).hexdigest()[:32] + ".db")


def match_expression(terms: Sequence[str]) -> str:
    """An FTS5 query matching any of ``terms``, each quoted (never an operator)."""
    return " OR ".join(f'"{term}"' for term in terms)


def raw_insert(conn: Any, candidates: Sequence[Candidate], now: int,
               scope_key: str = "repo:acme/widgets") -> None:
    """The rows a write batch of ``candidates`` inserts, written directly in one
    transaction."""
    conn.execute("BEGIN IMMEDIATE")
    seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM records").fetchall()[0][0]
    rows, tokens = [], []
    for offset, c in enumerate(candidates):
        keywords = list(c.keywords or ())
        rows.append((seq + offset, memory_id(scope_key, seq + offset), scope_key, c.kind.value,
                     c.text, normalize_text(c.text), json.dumps(keywords),
                     c.source_thread_key, c.source_run_id, now, None, 0, c.confidence, None,
                     None, "active"))
        tokens.append((seq + offset, " ".join(index_tokens(c.text, keywords, ANALYZER))))
    conn.executemany(
        "INSERT INTO records (seq, id, scope_key, kind, text, norm, keywords,"
        " source_thread_key, source_run_id, created_at, last_used_at, use_count,"
        " confidence, supersedes, restates, status)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    conn.executemany("INSERT INTO records_fts (rowid, tokens) VALUES (?, ?)", tokens)
    conn.execute("COMMIT")


class RawScopes:
    """Baseline databases under ``root``, one a scope, written as a store's ``write`` is
    called (so a benchmark can write the same batches to a store and to its baseline)."""

    def __init__(self, root: str, clock: Any = None) -> None:
        import itertools

        os.makedirs(root, exist_ok=True)
        self.root = root
        self.conns: dict[str, Any] = {}
        self.clock = clock or itertools.count(1_790_000_000_000, 1000).__next__

    async def write(self, scope_key: str, batch: Sequence[Candidate]) -> None:
        conn = self.conns.get(scope_key)
        if conn is None:
            conn = self.conns[scope_key] = raw_connection(raw_path(self.root, scope_key), "off")
        raw_insert(conn, batch, self.clock(), scope_key)

    async def flush(self) -> None:
        return None

    async def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()
