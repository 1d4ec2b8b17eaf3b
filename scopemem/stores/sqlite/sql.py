"""What the SQLite store reads and writes of a row: the SQL it shares, rows to records and back.

Pure functions over an apsw connection or a row tuple (``schema.RECORD_COLUMNS``), used by
every part of the store; nothing here holds state.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from scopemem.core.records import Record, trusted_record
from scopemem.core.words import PLAIN, Analyzer
from scopemem.stores.shared.tokens import index_tokens
from scopemem.stores.sqlite import schema

# Rows changed or read per statement when a whole set is handled (eviction, sweep).
CHUNK = 500

# The retrieval prefilter: every active row holding one of the query's prefilter terms, with
# what ranking reads of it (seq, thread key, created, last used, status, the indexed terms),
# not the whole row: the engine ranks these, and only the few it keeps are read in full.
# CROSS JOIN pins the plan: the hits drive primary-key lookups into ``records``.
HITS_SQL = (
    f"SELECT seq, source_thread_key, created_at, last_used_at, status, {schema.HIT_TOKENS}"
    " FROM (SELECT rowid AS hit FROM records_fts WHERE records_fts MATCH ?)"
    " CROSS JOIN records ON seq = hit"
)
# The statistics weighing reads: the scope's active records (the index holds exactly those)
# and how many hold each term, from FTS5's own vocabulary table.
ACTIVE_COUNT_SQL = "SELECT count(*) FROM records WHERE status = 'active'"
VOCAB_TABLE_SQL = ("CREATE VIRTUAL TABLE IF NOT EXISTS temp.records_vocab"
                   " USING fts5vocab(main, records_fts, row)")
# The token index is an FTS5 b-tree forest: every write transaction adds a segment, and a
# query pays for every segment it must search (six segments make a small scope's lookup
# about seven times slower than one). After each write transaction to a scope of at most
# SMALL_INDEX_ROWS active rows the store counts segments (FTS5 data rowids carry the segment
# id above bit 37, the documented on-disk layout) and rebuilds the index into one segment
# when there are more than MAX_FTS_SEGMENTS: cheap for a small index. A rebuild rewrites the
# whole index, though: on a scope of 10,000 rows it cost a write of 50 about 10 ms every
# third write (90-130 ms at 100,000), while FTS5's own leveled merging (``automerge``, four
# segments a level) costs a logarithmic share. So a larger index is left to it, a few more
# segments that retrievals from memory (views.py) never read. Only speed depends on it,
# never an answer.
MAX_FTS_SEGMENTS = 4
SMALL_INDEX_ROWS = 2000
FTS_SEGMENTS_SQL = ("SELECT count(DISTINCT id >> 37) FROM records_fts_data"
                    " WHERE id >= (1 << 37)")


def apsw_module() -> Any:
    import apsw  # deferred: listing plugins must not pay for loading SQLite

    return apsw



def fts_tokens(text: str, keywords: Sequence[str], analyzer: Analyzer = PLAIN) -> str:
    """What the full-text index holds for a record: the terms it is indexed by
    (``shared.tokens.index_tokens``, the engine's own), space-joined, so a term matches in
    FTS exactly when the engine's gate says the record holds it."""
    return " ".join(index_tokens(text, keywords, analyzer))


def match_expression(tokens: Sequence[str]) -> str:
    # Terms are runs of letters, digits and marks, never a quote, so a quoted term is a
    # plain term: no operator, column filter or prefix syntax in the user's text can reach
    # the FTS5 parser.
    return " OR ".join(f'"{token}"' for token in tokens)



def record(row: Sequence[Any]) -> Record:
    """The record of a row of ``RECORD_COLUMNS`` (columns after those are ignored)."""
    keywords = row[5]
    # Each column by index (not slices unpacked): as fast, and a type checker can count them.
    return trusted_record(row[1], row[2], row[3], row[4],
                          json.loads(keywords) if keywords != "[]" else (),
                          row[6], row[7], row[8], row[9], row[10], row[11], row[12], row[13],
                          row[14], row[15])



def bumped(row: Sequence[Any], now: int) -> Record:
    """``engine.bump_usage(_record(row), now)`` without building the record twice."""
    keywords = row[5]
    return trusted_record(row[1], row[2], row[3], row[4],
                          json.loads(keywords) if keywords != "[]" else (),
                          row[6], row[7], row[8], now, row[10] + 1, row[11], row[12], row[13],
                          row[14], row[15])



def with_bumps(rows: Sequence[Sequence[Any]], pending: Mapping[int, list[int]]
                ) -> list[Sequence[Any]]:
    """Rows as they will be once the pending usage bumps are saved (see ``BUMP_SQL``)."""
    out: list[Sequence[Any]] = []
    for row in rows:
        bump = pending.get(row[0])
        if bump is not None:
            last = row[9]
            row = (*row[:9], bump[1] if last is None or bump[1] > last else last,
                   row[10] + bump[0], *row[11:])
        out.append(row)
    return out



# One statement for a whole save, whatever the number of rows or of retrievals in it: each
# row's bump is bound as [seq, uses, last use] in one JSON array. So a save costs one
# statement and a few microseconds per row, where a statement per retrieval's bumps cost
# some tens of microseconds each, and a longer window would only have added statements.
# A last use never moves back: bumps are saved a little after their retrieval, and another
# process may have used (or restated) the row in between.
BUMP_SQL = (
    "UPDATE records SET use_count = use_count + bump.uses,"
    " last_used_at = max(ifnull(last_used_at, 0), bump.last)"
    " FROM (SELECT value ->> 0 AS seq, value ->> 1 AS uses, value ->> 2 AS last"
    " FROM json_each(?)) AS bump WHERE records.seq = bump.seq"
)



def apply_bumps(conn: Any, pending: Mapping[int, list[int]]) -> None:
    """Persist pending usage bumps, of any number of rows and retrievals, in one
    parameterized ``UPDATE`` (never a statement per row, nor per retrieval)."""
    conn.execute(BUMP_SQL, (json.dumps([[seq, uses, last]
                                         for seq, (uses, last) in pending.items()]),))



def hit_entries(rows: Sequence[Sequence[Any]], pending: Mapping[int, list[int]]
                 ) -> list[tuple[int, frozenset[str], str, int, int]]:
    """What ``engine.rank_entries`` needs of each active row of ``HITS_SQL``: (seq, the
    indexed terms, thread key, last touched with the pending bumps applied, seq)."""
    entries = []
    for seq, thread, created_at, last_used_at, status, tokens in rows:
        if status != "active":
            continue
        bump = pending.get(seq)
        if bump is not None and (last_used_at is None or bump[1] > last_used_at):
            last_used_at = bump[1]
        entries.append((seq, frozenset(tokens.split()), thread,
                        created_at if last_used_at is None else last_used_at, seq))
    return entries



def rows_by_seq(conn: Any, seqs: Sequence[int]) -> list[Sequence[Any]]:
    rows: list[Sequence[Any]] = []
    for start in range(0, len(seqs), CHUNK):
        chunk = seqs[start:start + CHUNK]
        rows.extend(conn.execute(
            f"SELECT {schema.RECORD_COLUMNS} FROM records"
            f" WHERE seq IN ({', '.join('?' * len(chunk))}) ORDER BY seq", chunk))
    return rows



@contextlib.contextmanager
def snapshot(conn: Any) -> Iterator[None]:
    """A read transaction: every statement in the block reads the same committed state."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        if not conn.getautocommit():
            conn.execute("COMMIT")


@contextlib.contextmanager
def immediate(conn: Any) -> Iterator[None]:
    """A plain ``BEGIN IMMEDIATE`` transaction: committed if the block finishes, rolled back
    if it raises (the store's own ``_transaction`` adds usage bumps and views to this)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if not conn.getautocommit():
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def compact_index(conn: Any, active: int | None = None) -> None:
    """Merge the token index into one segment when it would have more than
    ``MAX_FTS_SEGMENTS`` after the commit, unless the scope's ``active`` rows (when given)
    are more than ``SMALL_INDEX_ROWS`` (see there). The caller holds a write transaction
    whose index changes FTS5 still holds in memory: they become one more segment at the
    commit, which the count cannot see yet."""
    if active is not None and active > SMALL_INDEX_ROWS:
        return
    if conn.execute(FTS_SEGMENTS_SQL).fetchall()[0][0] >= MAX_FTS_SEGMENTS:
        conn.execute("INSERT INTO records_fts (records_fts) VALUES ('optimize')")


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def indexed_terms(conn: Any, seqs: Sequence[int]) -> dict[int, list[str]]:
    """The indexed terms of the rows ``seqs`` that are in the token index, by seq: read from
    the FTS5 content table by its integer key (as ``schema.HIT_TOKENS`` reads them)."""
    terms: dict[int, list[str]] = {}
    for start in range(0, len(seqs), CHUNK):
        chunk = seqs[start:start + CHUNK]
        for seq, tokens in conn.execute(
                "SELECT id, c0 FROM records_fts_content"
                f" WHERE id IN ({', '.join('?' * len(chunk))})", chunk):
            terms[seq] = tokens.split()
    return terms
