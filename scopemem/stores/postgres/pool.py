"""The PostgreSQL store's connections: psycopg 3's async pool, opened on first use with the
schema migrated, and psycopg's errors said as the store's. psycopg is imported only here,
when a store first connects, so listing plugins never needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from scopemem.errors import StoreBusy, StoreError, StoreRefused, StoreUnreachable
from scopemem.stores.postgres import migrations
from scopemem.stores.postgres.options import PostgresOptions

__all__ = ["Connect", "Connections", "pipeline", "psycopg_modules"]

# A pooled autocommit connection, as each part of the store is given it.
Connect = Callable[[], AbstractAsyncContextManager[Any]]


def psycopg_modules() -> Any:
    try:
        import psycopg  # deferred: the plugin list must load without it
        import psycopg_pool
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise StoreError("postgres store: psycopg is not installed"
                         " (pip install -e '.[postgres]' from the scopemem checkout)") from exc
    return psycopg, psycopg_pool


def pipeline(conn: Any) -> contextlib.AbstractAsyncContextManager[Any]:
    """Pipeline mode on ``conn`` where the libpq has it (14 and later), else nothing."""
    psycopg, _pool = psycopg_modules()
    if psycopg.Pipeline.is_supported():
        return conn.pipeline()  # type: ignore[no-any-return]
    return contextlib.nullcontext()


def _check_dsn(psycopg: Any, dsn: str) -> dict[str, Any]:
    """The parameters ``dsn`` gives; ``StoreError`` naming the option when libpq cannot
    read it (libpq's message quotes the text around the mistake: the password, maybe)."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        params = None
    # An '@' or a '/' left unencoded in a URI's password ends it there: the rest is read as
    # the host or the port, which a connection error names. (A host starting with '@' is an
    # abstract Unix socket.)
    hosts = str((params or {}).get("host") or "").split(",")
    ports = str((params or {}).get("port") or "").replace(",", "").replace(" ", "")
    if params is None or any("@" in host[1:] for host in hosts) or not ports.isdigit() and ports:
        raise StoreError("postgres store: dsn: libpq cannot read the connection string (its"
                         " text is not shown: it may hold a password; in a URI write '@', ':'"
                         " and '/' in the password as %40, %3A and %2F)") from None
    return dict(params)


def _one_line(error: BaseException) -> str:
    """psycopg's message, its lines as one (it never holds the DSN's password)."""
    return " ".join(str(error).split())


def _hung_up(conn: Any) -> bool:
    """Whether an idle connection has something to read: the server's goodbye, or EOF."""
    try:
        if not hasattr(select, "poll"):  # Windows: select, whose descriptors are not capped
            return bool(select.select([conn.fileno()], [], [], 0)[0])
        poller = select.poll()  # select() refuses a descriptor past 1023
        poller.register(conn.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except Exception:  # no socket left to ask: as good as closed
        return True


class Connections:
    """The store's pool; ``after_migrate(conn)`` runs under the migration lock
    (``migrations.migrate``'s ``after``)."""

    def __init__(self, options: PostgresOptions,
                 after_migrate: Callable[[Any], Awaitable[None]]) -> None:
        self.options = options
        self._after_migrate = after_migrate
        self._pool: Any = None
        self._ready_lock: asyncio.Lock | None = None
        # Set by the store's ``close``: no new work, but what it drains may still connect.
        self.closed = False
        self._held = 0  # connections calls hold now
        self._failure: str | None = None  # the last attempt to connect's error, if it failed
        self._failed: asyncio.Future[str] | None = None  # see ``_next_failure``

    @property
    def opened(self) -> bool:
        return self._pool is not None

    @contextlib.asynccontextmanager
    async def connection(self, *, closing_ok: bool = False) -> AsyncIterator[Any]:
        """A pooled autocommit connection; psycopg's errors become ``StoreError``."""
        if self.closed and not closing_ok:
            raise StoreError("the postgres store is closed")
        psycopg, psycopg_pool = psycopg_modules()
        pool = await self._ready()
        try:
            async with self._live(pool) as conn:
                try:
                    yield conn
                except psycopg.OperationalError as exc:
                    if not conn.broken:
                        raise
                    # A restart, a failover, pg_terminate_backend: the same call on another
                    # connection may pass. (A transaction is rolled back whole, or was
                    # committed whole: a write tried again is deduplicated.)
                    raise StoreBusy(f"postgres store: the connection to the server was lost"
                                    f" in the call: {type(exc).__name__}: {exc}") from exc
        except psycopg_pool.PoolTimeout as exc:
            raise self._no_connection() from exc
        except psycopg.errors.QueryCanceled as exc:
            raise StoreBusy(f"postgres store: statement timed out: {exc}") from exc
        except psycopg.DataError as exc:  # the input itself: a smaller call may pass
            raise StoreRefused(f"postgres store: {type(exc).__name__}: {exc}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"postgres store: {type(exc).__name__}: {exc}") from exc

    def _no_connection(self) -> StoreBusy:
        """What the pool's wait running out means: every connection busy, or none opened."""
        wait = self.options.pool_wait_ms / 1000
        if self._held >= self.options.max_pool:
            return StoreBusy(f"postgres store: no connection free: all {self._held} of max_pool"
                             f" connections were busy for {wait:g} s (raise max_pool, and the"
                             " server's max_connections to match, or look for slow statements)")
        if self._failure is not None:
            return StoreBusy(f"postgres store: no connection free: {self._held} busy and no"
                             f" more could be opened within {wait:g} s: {self._failure}")
        return StoreUnreachable("postgres store: cannot connect to the server: no connection"
                                f" opened within {wait:g} s (a host that accepts and never"
                                " answers? put connect_timeout=5 in the DSN)")

    @contextlib.asynccontextmanager
    async def _live(self, pool: Any) -> AsyncIterator[Any]:
        """A pooled connection the server has not hung up on (a restart, a failover): one it
        did is closed and the next taken, with no round trip. (The pool's ``check=`` does
        the same but pauses, growing, after each refusal: seconds after a restart.)"""
        for _stale in range(self.options.max_pool):
            async with self._taken(pool) as conn:
                if not _hung_up(conn):
                    yield conn
                    return
                await conn.close()
        async with self._taken(pool) as conn:
            yield conn

    @contextlib.asynccontextmanager
    async def _taken(self, pool: Any) -> AsyncIterator[Any]:
        """A connection of the pool, counted as held while the caller has it."""
        conn = await self._get(pool)
        self._held += 1
        try:
            async with conn:
                yield conn
        finally:
            self._held -= 1
            await pool.putconn(conn)

    async def _get(self, pool: Any) -> Any:
        """A connection within ``pool_wait_ms``; ``StoreUnreachable`` as soon as an attempt
        to connect fails while none is held (the server cannot be reached)."""
        getting = asyncio.ensure_future(pool.getconn(timeout=self.options.pool_wait_ms / 1000))
        try:
            while True:
                failed = self._next_failure()
                await asyncio.wait((getting, failed), return_when=asyncio.FIRST_COMPLETED)
                if getting.done():
                    return getting.result()
                if not self._held:
                    raise StoreUnreachable("postgres store: cannot connect to the server:"
                                           f" {failed.result()} (each call tries again: check"
                                           " that the server is up and what the error names)")
        except BaseException:
            getting.cancel()  # a connection it was handed meanwhile goes back to the pool
            with contextlib.suppress(BaseException):
                await pool.putconn(await getting)
            raise

    def _next_failure(self) -> asyncio.Future[str]:
        """Resolved with the error of the next attempt to connect that fails."""
        if self._failed is None or self._failed.done():
            self._failed = asyncio.get_running_loop().create_future()
        return self._failed

    def _attempted(self, error: BaseException | None) -> None:
        """An attempt of the pool to connect ended: ``error`` when it failed."""
        if error is None:
            self._failure = None
            return
        self._failure = _one_line(error)
        if self._failed is not None and not self._failed.done():
            self._failed.set_result(self._failure)

    def _connection_class(self, psycopg: Any) -> Any:
        """psycopg's connection, telling ``_attempted`` how each attempt to connect ended."""
        attempted = self._attempted

        class Reporting(psycopg.AsyncConnection):  # type: ignore[misc]
            @classmethod
            async def connect(cls, *args: Any, **kwargs: Any) -> Any:
                try:
                    conn = await super().connect(*args, **kwargs)
                except psycopg.Error as exc:
                    attempted(exc)
                    raise
                attempted(None)
                return conn

        return Reporting

    async def close(self) -> None:
        """Close the pool (the store has drained what it had deferred)."""
        self.closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def _ready(self) -> Any:
        """The open pool, the schema migrated (once per store)."""
        if self._pool is not None:
            return self._pool
        if self.closed:
            raise StoreError("the postgres store is closed")
        if self._ready_lock is None:
            self._ready_lock = asyncio.Lock()
        async with self._ready_lock:
            if self._pool is not None:
                return self._pool
            psycopg, psycopg_pool = psycopg_modules()
            options = self.options
            params = _check_dsn(psycopg, options.dsn)
            kwargs: dict[str, Any] = {"autocommit": True}
            if options.statement_timeout_ms:
                # Added to the DSN's own options (else libpq's $PGOPTIONS): a keyword given
                # beside a DSN replaces the DSN's.
                given = params.get("options") or os.environ.get("PGOPTIONS", "")
                kwargs["options"] = (f"{given} -c statement_timeout="
                                     f"{options.statement_timeout_ms}").strip()
            try:
                first = await psycopg.AsyncConnection.connect(options.dsn, autocommit=True)
            except psycopg.OperationalError as exc:  # as once the pool is open: busy
                raise StoreUnreachable("postgres store: cannot connect to the server:"
                                       f" {_one_line(exc)}") from exc
            try:
                async with first as conn:
                    await migrations.migrate(conn, options.schema, self._after_migrate)
                # reconnect_timeout=0: a failed attempt is tried once more at once, then
                # given up, and the next call that finds no connection tries again: no call
                # waits out a growing pause after the server is back.
                pool = psycopg_pool.AsyncConnectionPool(
                    options.dsn, min_size=options.min_pool, max_size=options.max_pool,
                    kwargs=kwargs, open=False, name=f"scopemem-{options.schema}",
                    connection_class=self._connection_class(psycopg),
                    timeout=options.pool_wait_ms / 1000, reconnect_timeout=0)
                await pool.open(wait=options.min_pool > 0, timeout=30)
            except psycopg_pool.PoolTimeout as exc:  # a psycopg.Error too: caught first
                raise StoreError(f"postgres store: cannot connect: {exc}") from exc
            except psycopg.Error as exc:
                raise StoreError(f"postgres store: cannot open schema {options.schema!r}:"
                                 f" {type(exc).__name__}: {exc}") from exc
            if self.closed:
                await pool.close()
                raise StoreError("the postgres store is closed")
            self._pool = pool
            return pool
