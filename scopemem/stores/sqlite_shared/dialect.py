"""SQLite's spelling of the shared statements (``stores/shared/sql.py``), and their text.

A shard's tables are its own (no schema). A list is bound as one JSON array read with
``json_each``, so a statement's text never depends on what a client sent. Text compares in
byte order already. ``INDEXED BY`` names the index of a browsing page, a page's count and
the vectors of a model: without it the planner scans the scope's rows. A read of records'
rows starts with the scope's uses counter, which ``usage.py`` checks its uses not yet
saved against. Keywords are kept as a JSON array and tokens as space-joined text.
"""

from __future__ import annotations

from scopemem.stores.shared.dialect import Dialect
from scopemem.stores.shared.sql import Statements

__all__ = ["SQL", "SQLITE"]

SQLITE = Dialect(
    tables="", named=":{}", positional="?", typed=False,
    in_list="{column} IN (SELECT value FROM json_each(:{name}))", byte_order="",
    index_hints=True, lead="(SELECT uses FROM scopes WHERE scope_key = :scope), ",
    greatest="max", position="instr",
    prefix_of="substr({column}, 1, length({value})) = {value}",
    no_keywords="'[]'", no_tokens="''")
SQL = Statements(SQLITE)
