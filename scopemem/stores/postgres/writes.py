"""The PostgreSQL store's changes to a scope (``shared.changes`` over ``PgTx``), each one
transaction that first takes the scope's row ``FOR UPDATE`` (``PgTx.lock``): writers to a
scope queue there, across processes. A write is pipelined. ``add_counts`` is one statement
for every scope of the call, committed without waiting for the WAL: a server crash may lose
the last fraction of a second of counts, never a record. ``refold`` re-derives every row's
tokens when the analyzer changed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from scopemem.core.provenance import person_id
from scopemem.core.records import Candidate, CountRow, PurgeResult, Record, SweepResult, WriteCounts
from scopemem.core.scopes import record_seq
from scopemem.core.text import normalize_text
from scopemem.core.words import Analyzer
from scopemem.errors import ScopeLimitReached
from scopemem.stores.base import Clock, check_scope_key, retention_cutoff
from scopemem.stores.postgres import migrations
from scopemem.stores.postgres.browse import Browse
from scopemem.stores.postgres.options import PostgresOptions
from scopemem.stores.postgres.pool import Connect, pipeline
from scopemem.stores.postgres.statements import Statements, bigints, insert_row, record_of
from scopemem.stores.shared import changes
from scopemem.stores.shared import counts as counting
from scopemem.stores.shared.changes import Locked
from scopemem.stores.shared.tokens import record_tokens

__all__ = ["Counts", "PgTx", "Writes", "add_rows", "refold"]

log = logging.getLogger("scopemem.stores.postgres")

META_FOLDING = "folding"  # the meta row holding the analyzer's signature the rows follow



async def add_rows(conn: Any, sql: Statements, rows: Sequence[CountRow]) -> None:
    """Add ``rows`` in the caller's transaction (sorted, as ``merge_rows`` leaves them)."""
    if rows:
        await conn.execute(sql.add_counts, {
            "scopes": [row.scope_key for row in rows], "days": [row.day for row in rows],
            "names": [row.name for row in rows], "values": [row.value for row in rows]})


class Counts:
    """``add_counts`` and ``read_counts`` over ``connect``."""

    def __init__(self, sql: Statements, connect: Connect, clock: Clock,
                 options: PostgresOptions) -> None:
        self.sql = sql
        self._connection = connect
        self._clock = clock
        self._options = options

    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        checked = counting.check_rows(rows)
        if not checked:
            return
        now = self._clock()
        async with self._connection() as conn, conn.transaction():
            await conn.execute("SET LOCAL synchronous_commit = off")
            for scope_key in sorted({row.scope_key for row in checked}):  # one lock order
                await PgTx(conn, self.sql, scope_key, self._options).lock(now, True)
            await add_rows(conn, self.sql, checked)

    async def read_counts(self, scope_keys: Sequence[str] | None = None, *,
                          prefix: str | None = None, since_day: int = 0) -> list[CountRow]:
        keys = None if scope_keys is None else sorted({check_scope_key(k) for k in scope_keys})
        if counting.no_scope_starts(prefix):
            return []
        async with self._connection() as conn:
            statement = self.sql.read_counts if keys is None else self.sql.read_counts_of
            cursor = await conn.execute(statement, {
                "since": since_day, "keys": keys, "prefix": prefix})
            return [CountRow(scope, day, name, value)
                    for scope, day, name, value in await cursor.fetchall()]


class PgTx:
    """A transaction on one scope, as ``shared.changes`` runs it: lists bound as arrays, the
    token index the ``postings`` table."""

    def __init__(self, conn: Any, sql: Statements, scope: str, options: PostgresOptions
                 ) -> None:
        self.conn = conn
        self.sql = sql
        self.scope = scope
        self._options = options
        self.held = False  # the scope has a row, locked

    def ints(self, values: Sequence[int]) -> object:
        return bigints(values)

    async def lock(self, now: int, create: bool) -> Locked | None:
        """The scope's row ``FOR UPDATE``, made when ``create`` (counted against
        ``max_scopes``): the first statement of every change, so writers to a scope queue
        there, across processes."""
        row = await (await self.conn.execute(self.sql.lock_scope, {"scope": self.scope})
                     ).fetchone()
        if row is None and create:
            options = self._options
            if options.max_scopes:
                # New scopes are counted one at a time, across processes.
                await self.conn.execute("SELECT pg_advisory_xact_lock(%s)",
                                        (migrations.advisory_key(options.schema) ^ 1,))
                (held,) = await (await self.conn.execute(self.sql.count_scopes)).fetchone()
                if held >= options.max_scopes:
                    raise ScopeLimitReached(
                        f"postgres store: schema {options.schema!r} holds {held} scopes, the"
                        f" limit (max_scopes = {options.max_scopes}); a write to a new scope"
                        " is refused")
            await self.conn.execute(self.sql.new_scope, {"scope": self.scope, "now": now})
            row = await (await self.conn.execute(self.sql.lock_scope, {"scope": self.scope})
                         ).fetchone()
        self.held = row is not None
        return None if row is None else (row[0], row[1], row[2], row[3])

    async def rows(self, statement: str, params: dict[str, Any]) -> list[Any]:
        return list(await (await self.conn.execute(statement, params)).fetchall())

    async def rows_of(self, *queries: tuple[str, dict[str, Any]]) -> list[list[Any]]:
        cursors = [await self.conn.execute(statement, params) for statement, params in queries]
        return [await cursor.fetchall() for cursor in cursors]  # one wait when pipelined

    async def records(self, statement: str, params: dict[str, Any]) -> list[Record]:
        return [record_of(row) for row in await self.rows(statement, params)]

    async def run(self, statement: str, params: dict[str, Any]) -> None:
        await self.conn.execute(statement, params)

    async def count(self, statement: str, params: dict[str, Any]) -> int:
        return int(max((await self.conn.execute(statement, params)).rowcount, 0))

    async def many(self, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        async with self.conn.cursor() as cursor:
            await cursor.executemany(statement, rows)

    async def known(self, norms: list[str], seqs: list[int]) -> list[Record]:
        return await self.records(self.sql.batch_rows, {
            "scope": self.scope, "norms": norms, "seqs": bigints(seqs)})

    async def insert(self, rows: Sequence[tuple[int, Record, list[str]]], now: int) -> None:
        await self.many(self.sql.insert, [insert_row(self.scope, seq, r, now, tokens)
                                          for seq, r, tokens in rows])

    async def change(self, rows: Sequence[Record], now: int) -> None:
        await self.many(self.sql.change, [
            (r.use_count, r.last_used_at, r.confidence, r.status.value, r.status.value, now,
             self.scope, record_seq(r.id)) for r in rows])

    async def post(self, posted: Sequence[tuple[int, list[str], bool]]) -> None:
        if any(terms for _seq, terms, _c in posted):
            await self.conn.execute(self.sql.post, {
                "scope": self.scope, "terms": [t for _s, terms, _c in posted for t in terms],
                "seqs": bigints(seq for seq, terms, _c in posted for _t in terms),
                "continues": [c for _s, terms, c in posted for _t in terms]})

    async def unpost(self, seqs: Sequence[int]) -> None:
        if seqs:
            await self.conn.execute(self.sql.unpost, {"scope": self.scope,
                                                      "seqs": bigints(seqs)})

    async def follow(self, seqs: Sequence[int], beside: Mapping[int, Sequence[Any]]) -> None:
        await self.conn.execute(self.sql.mark_continues, {"scope": self.scope,
                                                          "seqs": bigints(seqs)})

    async def forget(self, params: dict[str, Any]) -> bool:
        await self.unpost([params["seq"]])  # while the row holds its tokens
        return await self.count(self.sql.forget, params) > 0

    async def drop(self) -> None:
        for statement in (self.sql.delete_postings, self.sql.delete_counters,
                          self.sql.find_peaks):
            await self.conn.execute(statement, {"scope": self.scope})

    async def counters(self, rows: Sequence[CountRow]) -> None:
        await add_rows(self.conn, self.sql, rows)


class Writes:
    """The transactions that change a scope's rows (``shared.changes``), over ``connect``."""

    def __init__(self, sql: Statements, analyzer: Analyzer, connect: Connect,
                 options: PostgresOptions, browse: Browse, clock: Clock,
                 retention_days: int) -> None:
        self.sql = sql
        self.analyzer = analyzer
        self._connect = connect
        self._options = options
        self._browse = browse
        self._clock = clock
        self.retention_days = retention_days

    @contextlib.asynccontextmanager
    async def _tx(self, scope_key: str, pipelined: bool = False) -> AsyncIterator[PgTx]:
        async with (self._connect() as conn,
                    pipeline(conn) if pipelined else contextlib.nullcontext(),
                    conn.transaction()):
            yield PgTx(conn, self.sql, scope_key, self._options)

    async def write(self, scope_key: str, fitted: Sequence[Candidate], cap: int
                    ) -> WriteCounts:
        """Write the checked, fitted batch under the scope's lock."""
        now = self._clock()
        # Pipelined: a statement whose answer nothing waits for is sent at once, so the
        # batch waits on the server only for the rows it reads and the commit.
        async with self._tx(scope_key, pipelined=True) as tx:
            return await changes.write(tx, self.analyzer, fitted, cap, now,
                                       retention_cutoff(now, self.retention_days))

    async def forget(self, scope_key: str, seq: int) -> bool:
        async with self._tx(scope_key) as tx:
            return await changes.forget(tx, seq, self._clock())

    async def sweep(self, scope_key: str, dry_run: bool = False) -> SweepResult:
        check_scope_key(scope_key)
        async with self._tx(scope_key) as tx:
            return await changes.sweep(tx, self._clock(), dry_run)

    async def delete_scope(self, scope_key: str) -> int:
        """``changes.delete_scope``, the scope's reaches with it."""
        check_scope_key(scope_key)
        async with self._tx(scope_key) as tx:
            deleted = await changes.delete_scope(tx, self._clock())
            if tx.held:
                await tx.conn.execute(self._browse.drop_scope, {"scope": scope_key})
        return deleted

    async def scrub_provenance(self, scope_key: str, person_key: str) -> int:
        """``changes.scrub_provenance``, and the scope's reaches naming the person deleted."""
        check_scope_key(scope_key)
        person = person_id(check_scope_key(person_key))
        async with self._tx(scope_key) as tx:
            changed = await changes.scrub_provenance(tx, self._clock(), person)
            if tx.held:
                await self._browse.scrub_reaches(tx.conn, scope_key, person)
        return changed

    async def purge(self, scope_keys: Sequence[str]) -> PurgeResult:
        """The retention purge, on each of ``scope_keys``, one transaction each."""
        now = self._clock()
        result = PurgeResult()
        for scope_key in scope_keys:
            async with self._tx(scope_key) as tx:
                result += await changes.purge(tx, now,
                                              retention_cutoff(now, self.retention_days))
        return result


async def refold(conn: Any, sql: Statements, analyzer: Analyzer, schema: str) -> None:
    """Re-derive every row's dedup key and tokens when they were written under other
    tokenizing rules or languages (``Analyzer.signature``). Runs under the migration
    lock, in one transaction; rows, ids, statuses and use counts are untouched."""
    signature = analyzer.signature
    cursor = await conn.execute(sql.get_meta, (META_FOLDING,))
    row = await cursor.fetchone()
    if row is not None and row[0] == signature:
        return
    async with conn.transaction():
        cursor = await conn.execute(sql.all_rows)
        rows = await cursor.fetchall()
        if rows:
            async with conn.cursor() as cur:
                await cur.executemany(sql.refold, [
                    (normalize_text(record.text),
                     record_tokens(record, analyzer) if record.is_active else [],
                     row[0], row[1])
                    for row in rows for record in (record_of(row[1:]),)])
            if row is None:  # a schema of a release that recorded no signature
                log.info("postgres store: schema %s: re-derived the tokens of %d records"
                         " (%s)", schema, len(rows), signature)
            else:
                # Another process may be using the schema under the recorded languages: it
                # would go on answering from terms this one has just replaced.
                log.warning("postgres store: schema %s: re-derived the tokens of %d records"
                            " (%s), written under %s: give every process using this schema"
                            " the same release and memory.languages, or each re-derives it"
                            " in turn", schema, len(rows), signature, row[0])
        await conn.execute(sql.unpost_all)
        await conn.execute(sql.post_all)
        await conn.execute(sql.bump_generations)  # no copy of the old terms holds
        await conn.execute(sql.set_meta, (META_FOLDING, signature))
