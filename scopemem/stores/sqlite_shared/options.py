"""The ``[memory.stores.sqlite]`` table: its options, their defaults and their checks.

``layout`` is kept for one release: ``"shared"`` is the only layout, and ``"file"`` (the
retired layout, a SQLite file per scope) is warned about, and its directory migrated
(``migrate.py``). ``max_open_connections`` and ``rank_processes`` were the file layout's:
set, they are ignored with a warning.
"""

from __future__ import annotations

import logging
import os

from scopemem.errors import ConfigError

__all__ = ["DEFAULT_PATH", "DEFAULT_USAGE_FLUSH_MS", "FILE_LAYOUT_OPTIONS", "LAYOUTS",
           "OPTIONS", "SYNCHRONOUS_LEVELS", "USAGE_FLUSH_MS_MAX", "warn_retired"]

DEFAULT_PATH = "./scopemem-data"
SYNCHRONOUS_LEVELS = ("off", "normal", "full", "extra")
#: ``layout``: every scope in a few shared files; ``"file"`` is retired (warned about).
LAYOUTS = ("file", "shared")
#: Options of the retired file layout: ignored here, with a warning.
FILE_LAYOUT_OPTIONS = ("max_open_connections", "rank_processes")
#: Every option of ``[memory.stores.sqlite]``.
OPTIONS = ("path", "synchronous", "busy_timeout_ms", "cache_rows", "usage_flush_ms",
           "max_scopes", "layout", *FILE_LAYOUT_OPTIONS)
# How long after a retrieval its usage bumps are saved, at most. A save costs about 10 us
# per row it updates, and a row retrieved many times in one window is updated once. What it
# risks is only that: a process killed outright loses the use counts of its last second
# (never a record).
DEFAULT_USAGE_FLUSH_MS = 1000
USAGE_FLUSH_MS_MAX = 60_000


# The retired settings warned about in this process (by key).
_warned: set[str] = set()


def warn_retired(key: str, message: str) -> None:
    """Log ``message`` about the retired file layout's setting ``key``, once a process: a
    command reads the settings to check them and again to build the store."""
    if key not in _warned:
        _warned.add(key)
        logging.getLogger("scopemem.stores.sqlite").warning(message)


def check_synchronous(value: object, name: str) -> str:
    if not isinstance(value, str) or value.lower() not in SYNCHRONOUS_LEVELS:
        raise ConfigError(f"{name}: must be one of {', '.join(SYNCHRONOUS_LEVELS)};"
                          f" got {value!r}")
    return value.lower()


def check_int(value: object, name: str, minimum: int, maximum: int | None = None) -> int:
    if (isinstance(value, bool) or not isinstance(value, int) or value < minimum
            or (maximum is not None and value > maximum)):
        bound = (f"from {minimum} to {maximum}" if maximum is not None
                 else f"of at least {minimum}")
        raise ConfigError(f"{name}: must be an integer {bound}; got {value!r}")
    return value


def check_path(value: object, name: str) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ConfigError(f"{name}: must be a non-empty directory path; got {value!r}")
    return value
