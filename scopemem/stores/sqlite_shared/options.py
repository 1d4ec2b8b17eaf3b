"""The ``[memory.stores.sqlite]`` table: its options, their defaults and their checks.
The retired file layout's options are read for one release and warned about
(``retired_options``).
"""

from __future__ import annotations

import logging
import os

from scopemem.errors import ConfigError
from scopemem.options import OptionsTable

__all__ = ["DEFAULT_PATH", "DEFAULT_USAGE_FLUSH_MS", "OPTIONS", "SYNCHRONOUS_LEVELS",
           "USAGE_FLUSH_MS_MAX", "retired_options"]

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


# The retired settings warned about in this process (by key): a command reads the settings
# to check them and again to build the store, and warns once.
_warned: set[str] = set()


def retired_options(settings: OptionsTable) -> None:
    """Warn about the file layout's settings, once a process each: ``layout = "file"``
    opens the shared layout all the same; its other options are ignored (and left out of
    ``config check``'s settings in effect)."""
    warnings = []
    if settings.choice_option("layout", "shared", LAYOUTS) == "file":
        key = settings.option_key("layout")
        warnings.append((key, f'{key} = "file": the file layout (a SQLite file per scope) is'
                         " retired; the shared layout is used, and a data directory of the"
                         " file layout is migrated into it when opened (docs/sqlite-store.md,"
                         ' "Migration from the file layout"). Remove the setting'))
    settings.record("layout", "shared")  # what runs, whatever is set
    for option in FILE_LAYOUT_OPTIONS:
        if option in settings.options:
            settings.ignore(option)
            key = settings.option_key(option)
            warnings.append((key, f"{key}: has no effect in the shared layout (an option of"
                             " the file layout, which is retired); ignored, remove it"))
    for key, message in warnings:
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
