"""Which of the SQLite store's two layouts a data directory holds, so that neither layout
opens a directory the other wrote.

A directory in the file layout holds one ``<readable>-<digest>.db`` per scope
(``files.scope_file_name``); one in the shared layout holds ``shard-NNN-of-NNN.db`` files
(``sqlite_shared.schema.shard_file_name``). Opened in the wrong layout, a store would find
none of the scopes written, answer as if memory were empty, and start a second set of
files beside the first: the records are not lost, but nothing reads them. So both stores
refuse such a directory at construction, naming the setting to change.

Left unset, ``layout`` is the one the directory already holds: ``"file"`` for a directory
of scope files (an installation from before the shared layout was the default keeps
reading its records), ``"shared"`` for anything else, a new directory included
(``default_layout``).
"""

from __future__ import annotations

import os
import re

from scopemem.errors import ConfigError

__all__ = ["LAYOUTS", "check_layout", "default_layout"]

#: ``layout``: one file per scope, or every scope in a few shared files (the default for a
#: new directory).
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
        f' the "{layout}" layout would not read; set {key} = "{other}" to read them (there'
        " is no conversion between the layouts yet), or choose another path")


def default_layout(path: object) -> str:
    """The layout of ``[memory.stores.sqlite]`` when ``layout`` is not set: ``"file"`` when
    the directory at ``path`` holds scope files, else ``"shared"`` (a ``path`` that is not
    a string is the store's to refuse, naming its key)."""
    if isinstance(path, str) and _holds(os.path.abspath(os.path.expanduser(path)),
                                        _SCOPE_FILE):
        return "file"
    return "shared"


def _holds(directory: str, name: re.Pattern[str]) -> bool:
    """Whether ``directory`` holds a file whose name matches ``name`` (no directory: no)."""
    try:
        entries = os.scandir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return False
    with entries:
        return any(name.match(entry.name) for entry in entries)
