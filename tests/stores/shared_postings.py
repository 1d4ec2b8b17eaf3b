"""What a shard of the shared-file layout says a scope's postings are (``sqlite_shared/fresh.py``),
read independently of the store's own statements, for tests that check them against the rows."""

from __future__ import annotations

from typing import Any


def scope_postings(conn: Any, scope: str) -> set[tuple[str, int]]:
    """The scope's ``(term, seq)`` postings: those of ``postings`` but for its stale rows, and
    its fresh ones. Also checks the side tables' own rules: a posting in one place only, a
    fresh row at or after the scope's ``fresh_from``, a stale row retired and still posted."""
    main = set(conn.execute("SELECT term, seq FROM postings WHERE scope_key = ?", (scope,)))
    fresh = set(conn.execute("SELECT term, seq FROM fresh_postings WHERE scope_key = ?",
                             (scope,)))
    stale = dict(conn.execute("SELECT seq, tokens FROM stale_postings WHERE scope_key = ?",
                              (scope,)))
    (fresh_from,), = conn.execute("SELECT fresh_from FROM scopes WHERE scope_key = ?",
                                  (scope,)).fetchall() or [(None,)]
    assert not main & fresh, "a posting both merged and fresh"
    # Retrievals read the side tables only of scopes whose fresh_from is set.
    assert fresh_from is not None or not (fresh or stale), "side rows, fresh_from unset"
    assert all(fresh_from is not None and seq >= fresh_from for _t, seq in fresh)
    for seq, tokens in stale.items():
        (status,), = conn.execute("SELECT status FROM records WHERE scope_key = ? AND seq = ?",
                                  (scope, seq)).fetchall() or [("purged",)]
        assert status != "active", f"row {seq} is stale but active"
        assert {(term, seq) for term in tokens.split()} <= main
    return {(term, seq) for term, seq in main if seq not in stale} | fresh
