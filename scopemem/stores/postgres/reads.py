"""A retrieval on the PostgreSQL store, its statements in order (``docs/storage.md``,
"PostgreSQL"). Every row read has its unsaved uses added (inside ``DeferredUsage.reading``);
nothing is written on a retrieval's path, and only the records returned are made.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any

from scopemem.core import engine
from scopemem.stores.base import Hit
from scopemem.stores.postgres.statements import (
    ROW_COLUMNS,
    Statements,
    bigints,
    last_touched,
    record_of,
)
from scopemem.stores.postgres.usage import DeferredUsage
from scopemem.stores.shared import tokens
from scopemem.stores.shared.bumps import bumped
from scopemem.stores.shared.cache import Loader, PostingsCache

if TYPE_CHECKING:
    from scopemem.stores.dense import DenseIndex

__all__ = ["FEW_POSTINGS", "search"]

#: A query whose prefilter terms have at most this many postings in the scope has the rows
#: of the records holding them read with its postings (at most this many rows: about as
#: many as the candidates a limit of 25 reads anyway, ``ranking.candidate_cap``).
FEW_POSTINGS = 128

Row = Sequence[Any]  # a row of ``statements.COLUMNS``


async def search(conn: Any, sql: Statements, usage: DeferredUsage, ranking: engine.Ranking,
                 scope_key: str, terms: engine.QueryTerms, limit: int, now: int, bump: bool,
                 cache: PostingsCache, load: Loader) -> list[Hit]:
    """The retrieval's hits. With a copy of the scope held (``shared.cache``), it is weighed
    at once and checked with the first read of the candidates' rows (which also reads the
    scope's change counter): when the counter has moved on, the copy is dropped and the
    retrieval is answered from the server's postings instead, as without a copy."""
    copy = cache.latest(scope_key)
    if copy is not None:
        hits = await _ranked(conn, sql, usage, ranking, scope_key, terms, limit, now, bump,
                             copy.active, engine.grouped(copy.terms(terms.stems), terms),
                             copy.continues, copy.touches, copy.generation, copy.dense)
        if hits is not None:
            cache.answered += 1
            return hits
        cache.discard(scope_key, copy.generation)
    cursor = await conn.execute(sql.postings, {
        "scope": scope_key, "terms": list(terms.stems), "prefilter": list(terms.prefilter_stems),
        "few": FEW_POSTINGS}, binary=True)
    rows = await cursor.fetchall()
    counted = [row[:ROW_COLUMNS] for row in rows if row[2] is not None]
    if not counted or counted[0][0] is None:
        return []
    postings, continues = tokens.read_postings(row[2:] for row in counted)
    cache.offer(scope_key, counted[0][1], sum(map(len, postings.values())), load)
    held = {row[ROW_COLUMNS]: row[ROW_COLUMNS:] for row in rows if row[ROW_COLUMNS] is not None}
    hits = await _ranked(conn, sql, usage, ranking, scope_key, terms, limit, now, bump,
                         counted[0][0], engine.grouped(postings, terms), continues, held=held)
    assert hits is not None  # nothing to check against a counter
    return hits


async def _ranked(conn: Any, sql: Statements, usage: DeferredUsage, ranking: engine.Ranking,
                  scope_key: str, terms: engine.QueryTerms, limit: int, now: int, bump: bool,
                  active: int, postings: Mapping[str, Collection[int]],
                  continues: AbstractSet[int],
                  touches: Mapping[int, tuple[int, object]] | None = None,
                  generation: int | None = None, dense: DenseIndex | None = None,
                  held: Mapping[int, Row] | None = None) -> list[Hit] | None:
    """Steps 2 and 3 (``tokens.Candidates``) from the query terms' ``postings`` in a scope
    of ``active`` records. With ``generation`` (they are a copy's), None when the scope's
    change counter is not that any more, before anything is counted; ``held``, rows read
    with the postings (by seq)."""
    held = held or {}
    few = bool(held) or sum(len(postings.get(term, ())) for term in terms.prefilter
                            ) <= FEW_POSTINGS
    choice: tokens.Candidates[Row] = tokens.Candidates(
        postings, continues, terms, limit, ranking, active, now, touches=touches,
        dense=dense, few=few)
    check = generation
    while True:
        found = [held[seq] for seq in choice.wanted if seq in held]
        unread = [seq for seq in choice.wanted if seq not in held]
        if check is not None:
            # The first read of the rows also reads the change counter: a copy answers
            # only at its own (even with no candidate: "nothing" must be checked too).
            cursor = await conn.execute(sql.active_rows_at, {
                "scope": scope_key, "seqs": bigints(unread)}, binary=True)
            rows = await cursor.fetchall()
            if not rows or rows[0][0] != check:
                return None
            check = None
            found.extend(row[1:] for row in rows if row[1] is not None)
        elif unread:
            cursor = await conn.execute(sql.active_rows, {
                "scope": scope_key, "seqs": bigints(unread)}, binary=True)
            found.extend(await cursor.fetchall())
        pending = usage.pending(scope_key)
        if pending:
            found = [bumped(row, pending) for row in found]
        if choice.found({row[0]: (last_touched(row), row) for row in found}):
            break
    ranked = choice.ranked()
    if not bump or not ranked:
        return [Hit(record_of(row), match) for row, match in ranked]
    usage.add(scope_key, [row[0] for row, _match in ranked], now)
    return [Hit(engine.bump_usage(record_of(row), now), match) for row, match in ranked]
