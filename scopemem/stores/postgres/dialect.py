"""PostgreSQL's spelling of the shared statements (``stores/shared/sql.py``).

Every table is in the store's schema (validated and quoted once, ``migrations.quoted``). A
value compared with NULL, and every array, names its type (a prepared statement cannot
infer it). A list is an array compared with ``= ANY``. Keys sort with ``COLLATE "C"`` (byte
order, as every store sorts; the browsing indexes are built with it). Keywords and tokens
are ``text[]``.
"""

from __future__ import annotations

from scopemem.stores.postgres.migrations import quoted
from scopemem.stores.shared.dialect import Dialect

__all__ = ["of"]


def of(schema: str) -> Dialect:
    """The dialect of the store's tables in ``schema``."""
    return Dialect(
        tables=f"{quoted(schema)}.", named="%({})s", positional="%s", typed=True,
        in_list="{column} = ANY(%({name})s::{type}[])", byte_order=' COLLATE "C"',
        index_hints=False, lead="", greatest="GREATEST", position="strpos",
        prefix_of="starts_with({column}, {value})", no_keywords="'{}'", no_tokens="'{}'")
