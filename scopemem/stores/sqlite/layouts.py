"""Which of the SQLite store's two layouts a data directory holds.

A directory in the file layout holds one ``<readable>-<digest>.db`` per scope
(``files.scope_file_name``); one in the shared layout holds ``shard-NNN-of-NNN.db`` files
(``sqlite_shared.schema.shard_file_name``). Opened in the wrong layout, a store would find
none of the scopes written, answer as if memory were empty, and start a second set of
files beside the first. So the file layout refuses a directory of shard files at
construction, naming the setting to change; the shared layout (the default, whatever the
directory holds) migrates a directory of scope files into shard files when it opens it
(``sqlite_shared.migrate``).
"""

from __future__ import annotations

import os
import re

from scopemem.errors import ConfigError

__all__ = ["LAYOUTS", "check_layout", "is_scope_file"]

#: ``layout``: one file per scope (deprecated), or every scope in a few shared files (the
#: default).
LAYOUTS = ("file", "shared")

_SHARD_FILE = re.compile(r"shard-[0-9]{3}-of-[0-9]{3}\.db\Z")
_SCOPE_FILE = re.compile(r".+-[0-9a-f]{32}\.db\Z")


def check_layout(directory: str, layout: str, key: str = "layout") -> None:
    """Raise ``ConfigError`` naming ``key`` when ``directory`` holds the database files of
    the layout other than ``layout``."""
    other = "shared" if layout == "file" else "file"
    if not _holds(directory, _SHARD_FILE if other == "shared" else _SCOPE_FILE):
        return
    files = "shard-NNN-of-NNN.db" if other == "shared" else "one per scope"
    raise ConfigError(
        f'{key}: {directory} holds database files of the "{other}" layout ({files}), which'
        f' the "{layout}" layout would not read; set {key} = "{other}" to read them, or'
        " choose another path")


def is_scope_file(name: str) -> bool:
    """Whether ``name`` is the name of a scope file of the file layout."""
    return _SCOPE_FILE.match(name) is not None


def _holds(directory: str, name: re.Pattern[str]) -> bool:
    """Whether ``directory`` holds a file whose name matches ``name`` (no directory: no)."""
    try:
        entries = os.scandir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return False
    with entries:
        return any(name.match(entry.name) for entry in entries)
