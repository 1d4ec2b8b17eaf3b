"""The SQLite store over shared files: every scope in a few shard files (the SQLite store's
default layout; see ``store.py`` and ``docs/storage.md``)."""

from scopemem.stores.sqlite_shared.store import SharedSqliteStore

__all__ = ["SharedSqliteStore"]
