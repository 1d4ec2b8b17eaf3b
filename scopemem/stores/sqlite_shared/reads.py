"""A retrieval, a use mark and a listing on one shard: the statements, in order.

They run on the read pool, on the thread's own connection to the scope's shard.

1. In one read transaction, the scope's active count and the postings of the query's terms
   (``statements.POSTINGS``);
2. ``tokens.term_weights``, ``tokens.covered`` and ``engine.rank_candidates``: the weights,
   the covered weight of each record the answer can need (``core.topk``) and the best
   ``candidate_cap(limit)``, with the very functions every other store ranks with;
3. the candidates' rows with the uses still pending applied (under the shard's usage lock,
   see ``usage.py``), and ``engine.score_candidates``: the answer. A candidate that left
   active status since step 1 (a concurrent forget) leaves the postings, and the candidates
   are chosen again without it;
4. one use of each record returned, pending until the next save.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from scopemem.core import engine
from scopemem.core.records import Kind, Record
from scopemem.core.scopes import record_seq
from scopemem.stores.base import Hit
from scopemem.stores.postgres import tokens
from scopemem.stores.sqlite import sql as sqlite_sql
from scopemem.stores.sqlite_shared import statements as st
from scopemem.stores.sqlite_shared.usage import PendingUses

__all__ = ["listing", "mark_used", "search"]


def rows_with_uses(conn: Any, uses: PendingUses, shard: int, scope_key: str, statement: str,
                    params: dict[str, Any]) -> list[Sequence[Any]]:
    """Rows of ``statement`` (``RECORD_COLUMNS``) as they are once the pending uses of the
    scope are saved."""
    with uses.locks[shard]:
        rows: list[Sequence[Any]] = conn.execute(statement, params).fetchall()
        pending = uses.of(shard, scope_key)
        if pending:
            return sqlite_sql.with_bumps(rows, pending)
    return rows


def search(conn: Any, uses: PendingUses, shard: int, ranking: engine.Ranking, scope_key: str,
           terms: engine.QueryTerms, limit: int, now: int, bump: bool) -> list[Hit]:
    with sqlite_sql.snapshot(conn):
        state = conn.execute(st.SCOPE_STATE, {"scope": scope_key}).fetchall()
        if not state:
            return []
        active = state[0][0]
        rows = conn.execute(st.POSTINGS, {"scope": scope_key,
                                          "terms": json.dumps(list(terms.terms))}).fetchall()
    postings: dict[str, set[int]] = {}
    continues: set[int] = set()
    for term, seq, continuing in rows:
        holders = postings.get(term)
        if holders is None:
            holders = postings[term] = set()
        holders.add(seq)
        if continuing:
            continues.add(seq)
    weights = tokens.term_weights(postings, active, terms, ranking)
    total = sum(weights)
    details: dict[int, tuple[int, Record]] = {}
    while True:
        covered = tokens.covered(postings, continues, terms, weights, limit, ranking)
        candidates = engine.rank_candidates(covered, total, limit, ranking, continues)
        wanted = [seq for _match, seq in candidates if seq not in details]
        if not wanted:
            break
        for row in rows_with_uses(conn, uses, shard, scope_key, st.ACTIVE_ROWS_BY_SEQ,
                                   {"scope": scope_key, "seqs": json.dumps(wanted)}):
            record = sqlite_sql.record(row)
            details[row[0]] = (record.last_touched, record)
        gone = {seq for seq in wanted if seq not in details}
        if not gone:
            break
        postings = {term: holders - gone for term, holders in postings.items()}
    if not candidates:
        return []
    ranked = engine.score_candidates(candidates, limit, now, details)
    if not bump:
        return [Hit(record, match) for record, match in ranked]
    uses.add(shard, scope_key, [record_seq(record.id) for record, _m in ranked], now)
    return [Hit(engine.bump_usage(record, now), match) for record, match in ranked]


def mark_used(conn: Any, uses: PendingUses, shard: int, scope_key: str, seqs: list[int],
              now: int) -> int:
    """One use of each of ``seqs`` that is an active row; how many."""
    found = [seq for (seq,) in conn.execute(st.ACTIVE_SEQS, {
        "scope": scope_key, "seqs": json.dumps(seqs)}).fetchall()]
    if found:
        uses.add(shard, scope_key, found, now)
    return len(found)


def listing(conn: Any, uses: PendingUses, shard: int, scope_key: str, limit: int,
            tokens_: list[str] | None, kind: Kind | None) -> list[Record]:
    """The newest active rows (holding one of ``tokens_``, of ``kind``, when given)."""
    rows = rows_with_uses(conn, uses, shard, scope_key, st.LISTING, {
        "scope": scope_key, "limit": limit,
        "tokens": None if tokens_ is None else json.dumps(tokens_),
        "kind": None if kind is None else str(kind)})
    return [sqlite_sql.record(row) for row in rows]
