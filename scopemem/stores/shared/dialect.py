"""How SQLite and PostgreSQL spell what the SQL stores' shared statements need.

The statements both stores run are built once (``shared/sql.py``) from a ``Dialect``: only
the few things the two databases write differently, each a field below. Each backend has
one (``sqlite_shared/dialect.py``, ``postgres/dialect.py``), which says why it spells them
as it does; ``docs/storage.md`` ("One SQL shape") has them side by side.
"""

from __future__ import annotations

import attrs

__all__ = ["Dialect"]


@attrs.frozen
class Dialect:
    """One database's spelling; the methods below are the only way statements use it."""

    #: Before a table's name: '' or a quoted schema and a dot.
    tables: str
    #: A named value: ``:{}`` or ``%({})s``.
    named: str
    #: A positional value: ``?`` or ``%s``.
    positional: str
    #: Whether a value's type is written after it where asked (``::text``).
    typed: bool
    #: ``column`` in the list bound as ``name`` (``{column}``, ``{name}``, ``{type}``).
    in_list: str
    #: After a key compared or sorted in byte order.
    byte_order: str
    #: Whether ``INDEXED BY`` is written.
    index_hints: bool
    #: What a read of records' rows starts with (a column and a comma, or nothing).
    lead: str
    #: The greater of two values (``max`` or ``GREATEST``).
    greatest: str
    #: The position of a substring, 0 for none (``instr`` or ``strpos``).
    position: str
    #: ``{column}`` starts with ``{value}``.
    prefix_of: str
    #: The empty keywords and the empty tokens a scrubbed row keeps.
    no_keywords: str
    no_tokens: str

    def table(self, name: str) -> str:
        return f"{self.tables}{name}"

    def value(self, name: str, type_: str = "") -> str:
        """The value bound as ``name``, its type written when the dialect needs it."""
        cast = f"::{type_}" if self.typed and type_ else ""
        return self.named.format(name) + cast

    def any_of(self, column: str, name: str, type_: str) -> str:
        """``column`` is one of the list bound as ``name`` (of ``type_`` values)."""
        return self.in_list.format(column=column, name=name, type=type_)

    def key(self, column: str = "scope_key") -> str:
        """``column`` compared and sorted in byte order, as every store sorts keys."""
        return f"{column}{self.byte_order}"

    def using(self, index: str) -> str:
        """``INDEXED BY index`` where the dialect writes it, else nothing."""
        return f" INDEXED BY {index}" if self.index_hints else ""

    def starts(self, column: str, value: str) -> str:
        return self.prefix_of.format(column=column, value=value)

    def holds(self, haystack: str, needle: str) -> str:
        """``haystack`` holds ``needle`` as a substring (no pattern characters)."""
        return f"{self.position}({haystack}, {needle}) > 0"
