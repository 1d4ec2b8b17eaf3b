"""The SQLite store over shared files: every scope in a few shard files (a preview of the
SQLite store's next layout; see ``store.py`` and ``docs/sqlite-store.md``)."""

from scopemem.stores.sqlite_shared.store import SharedSqliteStore

__all__ = ["SharedSqliteStore"]
