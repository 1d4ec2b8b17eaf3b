"""``[memory.stores.postgres]``: what the PostgreSQL store is configured with, validated
(the options and their defaults are ``docs/postgres-store.md``'s table). Every mistake is a
``ConfigError`` naming the key.
"""

from __future__ import annotations

import re

import attrs

from scopemem.errors import ConfigError
from scopemem.stores.base import StoreSettings
from scopemem.stores.postgres.usage import DEFAULT_USAGE_FLUSH_MS
from scopemem.stores.shared.cache import DEFAULT_MIN_POSTINGS, DEFAULT_POSTINGS_CACHE

__all__ = ["OPTIONS", "PostgresOptions", "check_schema_name", "options_from_settings"]

OPTIONS = ("dsn", "dsn_env", "schema", "min_pool", "max_pool", "statement_timeout_ms",
           "max_scopes", "postings_cache", "cache_min_postings", "usage_flush_ms",
           "pool_wait_ms")
DEFAULT_SCHEMA = "scopemem"
DEFAULT_MIN_POOL = 1
DEFAULT_MAX_POOL = 10
MAX_POOL = 1000
DEFAULT_STATEMENT_TIMEOUT_MS = 10_000
DEFAULT_POOL_WAIT_MS = 30_000
# A plain lower-case identifier: it is written into statements (quoted), never bound, so
# nothing but these characters may reach the SQL text.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@attrs.frozen(kw_only=True)
class PostgresOptions:
    dsn: str = attrs.field(repr=False)  # may hold a password: never printed
    schema: str = DEFAULT_SCHEMA
    min_pool: int = DEFAULT_MIN_POOL
    max_pool: int = DEFAULT_MAX_POOL
    statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS
    max_scopes: int = 0
    postings_cache: int = DEFAULT_POSTINGS_CACHE
    cache_min_postings: int = DEFAULT_MIN_POSTINGS
    usage_flush_ms: int = DEFAULT_USAGE_FLUSH_MS
    pool_wait_ms: int = DEFAULT_POOL_WAIT_MS


def check_schema_name(value: object, name: str = "schema") -> str:
    # PostgreSQL keeps the prefix pg_ for its own schemas and refuses to create one.
    if (not isinstance(value, str) or _SCHEMA_NAME.fullmatch(value) is None
            or value.startswith("pg_")):
        raise ConfigError(f"{name}: expected a lower-case identifier (letters, digits, _;"
                          " at most 63 characters, not starting with a digit or pg_),"
                          f" got {value!r}")
    return value


def options_from_settings(settings: StoreSettings) -> PostgresOptions:
    """The table's options, or ``ConfigError`` naming the first bad key. No I/O."""
    settings.unknown_options(OPTIONS)
    options = settings.options
    given = [key for key in ("dsn", "dsn_env") if key in options]
    if len(given) != 1:
        raise ConfigError(
            f"{settings.option_key('dsn')}: set exactly one of dsn and dsn_env"
            f" ({'both are' if given else 'neither is'} set)")
    if given[0] == "dsn":
        dsn = settings.string_option("dsn", "")
        settings.record("dsn", "<set>")  # config check prints the settings: never the DSN
    else:
        variable = settings.env_name_option("dsn_env", "", "the connection string")
        dsn = settings.environ.get(variable, "")
        if not dsn.strip() and not settings.validate_only:
            raise ConfigError(f"{settings.option_key('dsn_env')}: ${variable} is not set;"
                              " the PostgreSQL store needs its connection string"
                              f" (export {variable}=postgresql://…)")
    schema = check_schema_name(settings.options.get("schema", DEFAULT_SCHEMA),
                               settings.option_key("schema"))
    settings.record("schema", schema)
    min_pool = settings.int_option("min_pool", DEFAULT_MIN_POOL, 0, MAX_POOL)
    max_pool = settings.int_option("max_pool", max(DEFAULT_MAX_POOL, min_pool), 1, MAX_POOL)
    if max_pool < min_pool:
        raise ConfigError(f"{settings.option_key('max_pool')}: must be at least min_pool"
                          f" ({min_pool}), got {max_pool}")
    return PostgresOptions(
        dsn=dsn, schema=schema, min_pool=min_pool, max_pool=max_pool,
        statement_timeout_ms=settings.int_option(
            "statement_timeout_ms", DEFAULT_STATEMENT_TIMEOUT_MS, 0, 3_600_000),
        max_scopes=settings.int_option("max_scopes", 0, 0),
        postings_cache=settings.int_option("postings_cache", DEFAULT_POSTINGS_CACHE, 0),
        cache_min_postings=settings.int_option("cache_min_postings", DEFAULT_MIN_POSTINGS, 0),
        usage_flush_ms=settings.int_option("usage_flush_ms", DEFAULT_USAGE_FLUSH_MS, 0,
                                           60_000),
        pool_wait_ms=settings.int_option("pool_wait_ms", DEFAULT_POOL_WAIT_MS, 1, 600_000),
    )
