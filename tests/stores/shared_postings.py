"""What a shard of the shared-file layout says a scope's postings are (``sqlite_shared/index.py``),
read independently of the store's own statements, for tests that check them against the rows."""

from __future__ import annotations

from typing import Any

# The marker term of a record continuing its thread (``index.CONTINUES``), spelled out here so
# a change to it is a change these tests see.
CONTINUES = "\ue000"


def scope_documents(conn: Any, scope: str) -> dict[int, set[str]]:
    """The scope's documents in the shard's token index: seq → the terms it is indexed by
    (the marker included). Also checks the index's own rules: every document of the scope
    has the scope's rowids, and the scope's terms, and only they, carry its prefix."""
    found = conn.execute("SELECT sid FROM scopes WHERE scope_key = ?", (scope,)).fetchall()
    if not found:
        return {}
    (sid,), = found
    head = f"{sid:08x}"
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.test_vocab"
                 " USING fts5vocab(main, terms_fts, 'instance')")
    documents: dict[int, set[str]] = {}
    for term, doc in conn.execute("SELECT term, doc FROM temp.test_vocab"
                                  " WHERE substr(term, 1, 8) = ?", (head,)):
        assert doc >> 32 == sid, f"a document of scope {sid} under rowid {doc}"
        documents.setdefault(doc & 0xFFFFFFFF, set()).add(term[8:])
    return documents


def scope_postings(conn: Any, scope: str) -> set[tuple[str, int]]:
    """The scope's ``(term, seq)`` postings, the marker left out."""
    return {(term, seq) for seq, terms in scope_documents(conn, scope).items()
            for term in terms if term != CONTINUES}
