"""The real PostgreSQL server the Postgres tests run against, and their schemas.

``SCOPEMEM_TEST_POSTGRES_DSN``, else ``postgresql://127.0.0.1:5432/test``. Every test run
(each xdist worker is one) has a prefix of its own (the worker's id and a random part), and
every store built by a test a schema under it of its own: the contract suite's are emptied
after each test and lent to the next (``lend_schema``/``give_back``), the others dropped when
their test ends; whatever is left is dropped when the run ends. Without a reachable server
the tests are skipped with the reason; with ``CI=true`` in the environment that is a failure.
"""

from __future__ import annotations

import functools
import os
import secrets
from typing import Any

import pytest

DEFAULT_DSN = "postgresql://127.0.0.1:5432/test"
#: This process's: each xdist worker (``PYTEST_XDIST_WORKER``: ``gw0``, ``gw1``…) creates,
#: lends and drops schemas under its own prefix alone, never another worker's.
RUN_PREFIX = (f"scopemem_test_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
              f"_{secrets.token_hex(4)}")
_counter = 0


def dsn() -> str:
    return os.environ.get("SCOPEMEM_TEST_POSTGRES_DSN") or DEFAULT_DSN


@functools.cache
def unavailable() -> str | None:
    """Why the Postgres tests cannot run here, or None when they can."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]')"
    try:
        with psycopg.connect(dsn(), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"no PostgreSQL at {dsn()}: {str(exc).strip().splitlines()[0]}"
    return None


def require() -> None:
    """Skip (fail under ``CI=true``) when the server cannot be reached."""
    reason = unavailable()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and the Postgres suite cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def new_schema() -> str:
    global _counter
    _counter += 1
    return f"{RUN_PREFIX}_{_counter}"


# Migrated schemas emptied by earlier tests, ready for the next store: emptying one takes a
# few milliseconds, creating and migrating one a few hundred.
_free: list[str] = []


def lend_schema() -> str:
    """A schema of this run no store is using: an emptied one, else a new one."""
    return _free.pop() if _free else new_schema()


def give_back(*names: str) -> None:
    """Empty the schemas a test used (records, postings, scopes, counters and their totals,
    reaches, vectors) for the next test; one that cannot be emptied (never migrated: its store never
    connected) is dropped."""
    import psycopg

    with psycopg.connect(dsn(), autocommit=True) as conn:
        for name in names:
            try:
                # DELETE, not TRUNCATE: a test leaves a few rows, and TRUNCATE makes new
                # files for every table and index, several times the cost.
                with conn.transaction():
                    for table in ("records", "postings", "scopes", "counters", "count_totals",
                                  "reaches", "vectors"):
                        conn.execute(f'DELETE FROM "{name}".{table}')
            except psycopg.Error:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
            else:
                _free.append(name)


def drop_schemas(*names: str) -> None:
    import psycopg

    with psycopg.connect(dsn(), autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def drop_run_schemas() -> None:
    """Every schema this run created and left behind."""
    import psycopg

    with psycopg.connect(dsn(), autocommit=True) as conn:
        names = [name for (name,) in conn.execute(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)",
            (RUN_PREFIX,)).fetchall()]
    if names:
        drop_schemas(*names)


def make(schema: str | None = None, dsn_options: str = "", server: str | None = None,
         **kwargs: Any) -> Any:
    """A PostgresStore on the test server (or at the DSN ``server``), in ``schema`` (a new
    one by default); ``dsn_options``: the DSN's ``options`` parameter."""
    from scopemem.stores.postgres import PostgresStore
    from scopemem.stores.postgres.options import PostgresOptions

    options = {key: kwargs.pop(key) for key in ("min_pool", "max_pool", "statement_timeout_ms",
                                                "max_scopes", "postings_cache",
                                                "cache_min_postings", "usage_flush_ms",
                                                "pool_wait_ms")
               if key in kwargs}
    options.setdefault("min_pool", 0)
    options.setdefault("max_pool", 4)
    url = server or dsn()
    if dsn_options:
        from psycopg.conninfo import make_conninfo

        url = make_conninfo(url, options=dsn_options)
    return PostgresStore(PostgresOptions(dsn=url, schema=schema or new_schema(), **options),
                         **kwargs)
