"""``[memory.stores.postgres]``: what the PostgreSQL store is configured with, validated
(the options and their defaults are ``docs/postgres-store.md``'s table). Every mistake is a
``ConfigError`` naming the key.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from scopemem.errors import ConfigError
from scopemem.stores.base import StoreSettings
from scopemem.stores.postgres.usage import DEFAULT_USAGE_FLUSH_MS
from scopemem.stores.shared.cache import DEFAULT_MIN_POSTINGS, DEFAULT_POSTINGS_CACHE

__all__ = ["OPTIONS", "PostgresOptions", "check_schema_name", "options_from_settings"]

DEFAULT_SCHEMA = "scopemem"
MAX_POOL = 1000
# A plain lower-case identifier: it is written into statements (quoted), never bound, so
# nothing but these characters may reach the SQL text.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def _whole(default: int, low: int, high: int | None = None) -> Any:
    """A whole-number option: its default and its range (``options_from_settings``)."""
    return attrs.field(default=default, metadata={"range": (low, high)})


@attrs.frozen(kw_only=True)
class PostgresOptions:
    dsn: str = attrs.field(repr=False)  # may hold a password: never printed
    schema: str = DEFAULT_SCHEMA
    min_pool: int = _whole(1, 0, MAX_POOL)
    max_pool: int = _whole(10, 1, MAX_POOL)
    statement_timeout_ms: int = _whole(10_000, 0, 3_600_000)
    max_scopes: int = _whole(0, 0)
    postings_cache: int = _whole(DEFAULT_POSTINGS_CACHE, 0)
    cache_min_postings: int = _whole(DEFAULT_MIN_POSTINGS, 0)
    usage_flush_ms: int = _whole(DEFAULT_USAGE_FLUSH_MS, 0, 60_000)
    pool_wait_ms: int = _whole(30_000, 1, 600_000)


OPTIONS = ("dsn", "dsn_env", *(field.name for field in attrs.fields(PostgresOptions)[1:]))


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
    wholes: dict[str, int] = {}
    for field in attrs.fields(PostgresOptions)[2:]:
        key, default = field.name, field.default or 0
        if key == "max_pool":  # at least min_pool
            default = max(default, wholes["min_pool"])
        wholes[key] = settings.int_option(key, default, *field.metadata["range"])
        if key == "max_pool" and wholes[key] < wholes["min_pool"]:
            raise ConfigError(f"{settings.option_key(key)}: must be at least min_pool"
                              f" ({wholes['min_pool']}), got {wholes[key]}")
    return PostgresOptions(dsn=dsn, schema=schema, **wholes)
