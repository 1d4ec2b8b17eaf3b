"""The shard files as this process opened them (``docs/storage.md``, "The file at the
path"): a connection commits only while its file is still the one at the shard's path, so a
file deleted, moved or replaced under a running process never takes writes no later process
reads.
"""

from __future__ import annotations

import os
from typing import Any

from scopemem.errors import StoreError

__all__ = ["OpenedFile", "holds_data", "identity"]


def identity(path: str) -> tuple[int, int] | None:
    """The device and inode of the file at ``path``; None when there is none."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st.st_dev, st.st_ino


def holds_data(path: str) -> bool:
    """Whether ``path`` may hold something: not missing, and not a 0-byte file without a
    WAL (created but never written, its first write stopped by a full disk, say)."""
    for name in (path, path + "-wal"):
        try:
            if os.stat(name).st_size > 0:
                return True
        except OSError:  # as ``os.path.exists``: nothing to read there
            return False
    return False


class OpenedFile:
    """A database file as a connection opened it, and the check (a ``stat`` of the path,
    never of a descriptor: closing a second one would release SQLite's locks) that it is
    still the one at its path."""

    def __init__(self, path: str, identity: tuple[int, int]) -> None:
        self.path = path
        self.identity = identity

    @classmethod
    def opening(cls, path: str, open_: Any) -> tuple[Any, OpenedFile]:
        """``open_()``'s connection to ``path`` and its file, refused if replaced
        meanwhile."""
        try:
            before = identity(path)
        except OSError as exc:
            raise StoreError(f"sqlite store: cannot open {path}: {exc}") from exc
        conn = open_()
        try:
            after = identity(path)
        except OSError as exc:
            conn.close()
            raise StoreError(f"sqlite store: cannot open {path}: {exc}") from exc
        if after is None or (before is not None and before != after):
            conn.close()
            raise StoreError(f"sqlite store: {path} was deleted or replaced while it was"
                             " being opened; nothing was written")
        return conn, cls(path, after)

    def problem(self) -> str | None:
        """None while the path names the opened file, else what became of it."""
        try:
            now = identity(self.path)
        except OSError as exc:
            return f"cannot be checked ({exc})"
        if now is None:
            return "was deleted or moved away"
        if now != self.identity:
            return "was replaced by another file"
        return None

    def refusal(self, problem: str) -> StoreError:
        return StoreError(
            f"sqlite store: {self.path} {problem} since this process opened it; nothing"
            " was written. Restore the data directory as it was (every file, the -wal"
            " files included), then restart the process (scopemem serve, the bot)")

    def _on_commit(self) -> bool:
        problem = self.problem()
        if problem is not None:  # raised in the hook: SQLite rolls the transaction back
            raise self.refusal(problem)
        return False

    def install(self, conn: Any) -> None:
        conn.set_commit_hook(self._on_commit)
