"""A large scope's recent postings, kept apart from the rest so a write touches few pages.

``postings`` is ordered by scope, then term, then seq: the order every retrieval reads. A
write of realistic text posts each new record under its twenty-odd terms and takes an
evicted record out of as many, and in a scope of 10,000 records those terms' postings lie on
hundreds of different pages: a write of 50 at the cap rewrote about 1,000 pages (4 MiB of
WAL to write and sync, then to checkpoint), eight times what a raw FTS5 insert costs.

So a scope of at least ``FRESH_ROWS`` active records keeps its recent changes in two small
tables of the same shard (``schema.py``), each ordered by scope first:

* ``fresh_postings``: the postings of its rows from ``scopes.fresh_from`` on (a write's new
  rows), in ``postings``' own shape;
* ``stale_postings``: the rows retired (evicted, superseded, swept) whose postings are still
  in ``postings``, with the terms they hold there.

A scope's postings are then ``postings`` but for its stale rows, and ``fresh_postings``
(``statements.POSTINGS``, ``SCOPE_POSTINGS``): the same set, so every retrieval ranks as
before. ``scopes.fresh_from`` is set whenever the scope has rows in either table, so the
retrievals of every other scope read ``postings`` alone. Retiring a fresh row takes its
postings out of ``fresh_postings`` at once. A forget always takes the row's terms out at
once, wherever they are: a forgotten record leaves no trace in either table.

Once the fresh and stale rows together pass ``1 / MERGE_SHARE`` of the active ones (and
``MERGE_MIN``), the write moves them into ``postings`` (``merge``), in the same transaction:
each of the terms' pages is then rewritten once for many writes, not once for each. An import
merges first, so it works on ``postings`` alone. Every step is inside the transaction of the
write that takes it, so a crash leaves either all of it or none.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from scopemem.stores.sqlite_shared import statements as st

__all__ = ["FRESH_ROWS", "MERGE_MIN", "MERGE_SHARE", "Route", "merge", "merge_due", "post",
           "unpost", "unpost_now"]

#: A scope with at least this many active rows posts its writes to ``fresh_postings``.
FRESH_ROWS = 1_000
#: Fresh and stale rows merged once they pass this share of the active rows ...
MERGE_SHARE = 8
#: ... and this many.
MERGE_MIN = 256


@attrs.define
class Route:
    """Where a write's postings go: ``fresh_from`` as the scope's row holds it (None: every
    posting is in ``postings``), and whether the scope's changes go to the side tables."""

    scope_key: str
    fresh_from: int | None
    apart: bool
    next_seq: int  # the seq the scope's next row gets

    @classmethod
    def of(cls, scope_key: str, active: int, fresh_from: int | None, last_seq: int
           ) -> Route:
        return cls(scope_key, fresh_from, fresh_from is not None or active >= FRESH_ROWS,
                   last_seq + 1)

    def set_apart(self, conn: Any) -> None:
        """Mark the scope as having side tables, fresh from the write's first new row on
        (every row the write or a later one adds; retrievals read the side tables only
        of scopes marked so)."""
        if self.fresh_from is None:
            self.fresh_from = self.next_seq
            conn.execute(st.SET_FRESH_FROM, {"scope": self.scope_key, "seq": self.next_seq})

    def is_fresh(self, seq: int) -> bool:
        """Whether row ``seq``'s postings are in ``fresh_postings``."""
        return self.fresh_from is not None and seq >= self.fresh_from


def post(conn: Any, route: Route, rows: Sequence[tuple[str, int, int]]) -> None:
    """Post new rows' ``(term, seq, continues)``, in one statement."""
    if not rows:
        return
    params = {"scope": route.scope_key, "rows": json.dumps(rows, ensure_ascii=False)}
    if not route.apart:
        conn.execute(st.POST_ROWS, params)
        return
    route.set_apart(conn)
    conn.execute(st.FRESH_POST_ROWS, params)


def unpost(conn: Any, route: Route, held: Iterable[tuple[int, str]], *, at_once: bool
           ) -> int:
    """Take rows out of the postings, from each row's ``(seq, tokens)``: fresh ones from
    ``fresh_postings``, the others marked stale, or with ``at_once`` (a forget) taken out of
    ``postings`` now. The number of postings taken out."""
    gone = 0
    fresh: list[int] = []
    now: list[tuple[str, int]] = []
    stale: list[tuple[int, str]] = []
    for seq, tokens in held:
        terms = tokens.split()
        gone += len(terms)
        if route.is_fresh(seq):
            fresh.append(seq)
        elif route.apart and not at_once:
            stale.append((seq, tokens))
        else:
            now.extend((term, seq) for term in terms)
    scope = route.scope_key
    if fresh:
        conn.execute(st.FRESH_UNPOST, {"scope": scope, "seqs": json.dumps(fresh)})
    if now:
        unpost_now(conn, scope, now)
    if stale:
        route.set_apart(conn)
        conn.execute(st.STALE_ROWS_ADD, {"scope": scope,
                                         "rows": json.dumps(stale, ensure_ascii=False)})
    return gone


def unpost_now(conn: Any, scope_key: str, pairs: Sequence[tuple[str, int]]) -> None:
    """Take ``(term, seq)`` pairs out of ``postings``, in one statement."""
    conn.execute(st.UNPOST_ROWS, {"scope": scope_key,
                                  "rows": json.dumps(pairs, ensure_ascii=False)})


def merge_due(conn: Any, route: Route, last_seq: int, active: int) -> bool:
    """Whether the scope's fresh and stale rows are due to be merged (``merge``)."""
    fresh = last_seq - route.fresh_from + 1 if route.fresh_from is not None else 0
    stale = int(conn.execute(st.STALE_COUNT, {"scope": route.scope_key}).fetchall()[0][0])
    if not route.apart:  # a scope grown small again: whatever is left, now
        return stale > 0
    return fresh + stale > max(MERGE_MIN, active // MERGE_SHARE)


def merge(conn: Any, route: Route) -> None:
    """Move the scope's fresh postings into ``postings`` and take its stale rows' out, in
    the caller's transaction."""
    scope = {"scope": route.scope_key}
    conn.execute(st.MERGE_FRESH, scope)
    conn.execute(st.DROP_FRESH, scope)
    stale = conn.execute(st.STALE_ROWS, scope).fetchall()
    if stale:
        # In any order: SQLite sorts the pairs itself to look them up (``UNPOST_ROWS``).
        unpost_now(conn, route.scope_key,
                   [(term, seq) for seq, tokens in stale for term in tokens.split()])
        conn.execute(st.DROP_STALE, scope)
    if route.fresh_from is not None:
        conn.execute(st.SET_FRESH_FROM, {"scope": route.scope_key, "seq": None})
        route.fresh_from = None
