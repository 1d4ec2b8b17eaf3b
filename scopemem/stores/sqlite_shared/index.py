"""Every scope's postings in one contentless FTS5 table a shard (``docs/storage.md``, "The
token index"): rowid ``sid << 32 | seq``, each term prefixed by the sid in eight hex digits,
plus the marker ``CONTINUES`` for a record continuing its thread; the terms stay in
``records.tokens``.

Why FTS5, not rows of ``(scope, term, seq)``: a write posts each new record under twenty-odd
terms, a B-tree seek and insert each; FTS5 appends a write's postings as one segment and
merges in C (``benchmarks/postings_bench.py``: 0.26x the rows' mean cost, 0.11x their p99).
Why one table of prefixed terms: a shard holds thousands of scopes, and a scope's terms are
one range of the vocabulary, so no query matches another scope's document. A term is letters,
digits and marks (``core.words``): the ``ascii`` tokenizer keeps it whole, and the marker (a
private-use character) is no term.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from scopemem.stores.sqlite_shared.sql import dumps

__all__ = ["CONTINUES", "DELETE_MERGE", "MAX_SEQ", "MAX_SID", "bounds", "post", "prefix", "rowid",
           "scrub", "set_merging", "unpost", "unpost_all", "unpost_scope"]

# [[rowid, text], ...] in; [rowid, ...] out; merged into one segment.
INDEX_ROWS = ("INSERT INTO terms_fts (rowid, tokens) SELECT value ->> 0, value ->> 1"
              " FROM json_each(:rows)")
UNINDEX_ROWS = "DELETE FROM terms_fts WHERE rowid IN (SELECT value FROM json_each(:rowids))"
MERGE_INDEX = "INSERT INTO terms_fts (terms_fts) VALUES ('optimize')"
UNINDEX_RANGE = "DELETE FROM terms_fts WHERE rowid >= :low AND rowid < :high"
UNINDEX_ALL = "INSERT INTO terms_fts (terms_fts) VALUES ('delete-all')"
DELETE_MERGE_IS = "SELECT v FROM terms_fts_config WHERE k = 'deletemerge'"
SET_DELETE_MERGE = "INSERT INTO terms_fts (terms_fts, rank) VALUES ('deletemerge', :percent)"

#: FTS5's ``deletemerge``: a level of the index is merged once this percentage of its
#: postings are of documents taken out (FTS5's default: 10). At the cap a write takes out
#: as many documents as it adds: at 10% a 500-record scope merged most of its postings at
#: every write (4 M of its 42 M instructions); at 50% in one write out of several, and the
#: postings taken out stay at most about half of a level (``docs/sqlite-store.md``).
DELETE_MERGE = 50

#: The marker term of a record continuing its predecessor's thread (never a word's term).
CONTINUES = "\ue000"
#: A rowid is ``sid << 32 | seq``: both must fit.
MAX_SEQ = 2**32 - 1
MAX_SID = 2**31 - 1


def prefix(sid: int) -> str:
    """What every term of scope ``sid`` is prefixed with."""
    return f"{sid:08x}"


def bounds(sid: int) -> tuple[str, str]:
    """The range of the vocabulary holding scope ``sid``'s terms: ``[low, high)``."""
    return prefix(sid), prefix(sid + 1)


def rowid(sid: int, seq: int) -> int:
    return sid << 32 | seq


def post(conn: Any, sid: int, rows: Iterable[tuple[int, Sequence[str], bool]]) -> None:
    """Index rows' ``(seq, terms, continues)`` in one statement."""
    head = prefix(sid)
    between = " " + head
    marker = between + CONTINUES
    base = sid << 32
    documents = [[base | seq, head + between.join(terms) + (marker if continues else "")
                  if terms else (head + CONTINUES if continues else "")]
                 for seq, terms, continues in rows]
    if documents:
        conn.execute(INDEX_ROWS, {"rows": dumps(documents)})


def unpost(conn: Any, sid: int, seqs: Sequence[int]) -> None:
    """Take rows ``seqs`` out of the index, in one statement."""
    if seqs:
        conn.execute(UNINDEX_ROWS, {"rowids": json.dumps([rowid(sid, seq)
                                                             for seq in seqs])})


def unpost_scope(conn: Any, sid: int) -> None:
    """Take every document of scope ``sid`` out of the index (its range of rowids)."""
    conn.execute(UNINDEX_RANGE, {"low": rowid(sid, 0), "high": rowid(sid + 1, 0)})


def unpost_all(conn: Any) -> None:
    """Empty the index: every scope's documents out, every segment dropped."""
    conn.execute(UNINDEX_ALL)


def set_merging(conn: Any) -> None:
    """Give the shard's index ``DELETE_MERGE`` (kept in its config table, so a shard made
    by an earlier release gets it when first opened); written only when it differs."""
    if conn.execute(DELETE_MERGE_IS).fetchall() != [(DELETE_MERGE,)]:
        conn.execute(SET_DELETE_MERGE, {"percent": DELETE_MERGE})


def scrub(conn: Any) -> None:
    """Merge the index into one segment, which leaves no trace of the documents taken out
    (a forget's: their terms stay in the old segments until those are merged away)."""
    conn.execute(MERGE_INDEX)
