"""The statements both SQL stores run are written once (``stores/shared/sql.py``) and
rendered in each store's dialect: each rendering must be its database's SQL alone, and
every statement reading or changing a scope's rows must name the scope."""

from __future__ import annotations

import re

import pytest

from scopemem.stores.postgres import dialect as postgres_dialect
from scopemem.stores.postgres.statements import Statements as PostgresStatements
from scopemem.stores.shared.sql import Statements
from scopemem.stores.sqlite_shared import dialect as sqlite_dialect

SQLITE = sqlite_dialect.SQL
POSTGRES = Statements(postgres_dialect.of("scopemem"))
#: Tables holding one scope's rows (``scopes`` is read whole by a page of scopes).
SCOPED = ("records", "vectors", "counters")
#: Statements reading every scope on purpose: the counters and reaches of the hub's charts
#: and logs (by day, run, prefix or time), a count and a page of scopes.
ACROSS = {"read_counts", "read_counts_of", "prune_reaches", "reaches_of_run", "all_reaches"}


def statements(sql: Statements) -> dict[str, str]:
    found = {name: text for name, text in vars(sql).items()
             if isinstance(text, str) and not name.startswith("_")}
    found["scope_page"] = sql.scope_page("active", True)
    return found


def test_both_stores_render_the_same_statements():
    assert statements(SQLITE).keys() == statements(POSTGRES).keys()
    assert len(statements(SQLITE)) >= 40
    # The PostgreSQL store's own statements include every shared one, as rendered here.
    own = PostgresStatements("scopemem")
    for name, text in statements(POSTGRES).items():
        if name != "scope_page":
            assert getattr(own, name) == text, name


def test_a_sqlite_rendering_is_sqlite_sql():
    for name, text in statements(SQLITE).items():
        assert "%(" not in text and "%s" not in text, name
        assert "ANY(" not in text and "::" not in text and "COLLATE" not in text, name
        assert '"scopemem"' not in text, name


def test_a_postgres_rendering_is_postgres_sql():
    for name, text in statements(POSTGRES).items():
        assert not re.search(r"(?<![:\w]):[a-z]", text), name  # no ``:name`` value
        assert "json_each" not in text and "INDEXED BY" not in text and "?" not in text, name
        assert "instr(" not in text and "ifnull" not in text, name
        for table in (*SCOPED, "scopes", "count_totals", "reaches"):
            assert not re.search(rf"(FROM|INTO|UPDATE|JOIN) {table}\b", text), (name, table)


@pytest.mark.parametrize("sql", [SQLITE, POSTGRES], ids=["sqlite", "postgres"])
def test_every_statement_on_a_scopes_rows_names_the_scope(sql: Statements):
    d = sql.dialect
    scope = re.escape(f"scope_key = {d.value('scope')}")
    for name, text in statements(sql).items():
        mentions = sum(len(re.findall(rf"(FROM|INTO|UPDATE|JOIN) {re.escape(d.table(t))}\b",
                                      text)) for t in SCOPED)
        if not mentions or name in ACROSS:
            continue
        # ``set_source`` binds its scope by position, as its rows are many; a subquery may
        # be keyed by its outer row's scope.
        keyed = (len(re.findall(scope, text)) + text.count(f"scope_key = {d.positional}")
                 + len(re.findall(r"\w\.scope_key = \w\.scope_key", text)))
        assert keyed >= mentions, name


def test_a_list_is_bound_as_each_database_reads_one():
    assert SQLITE.active_seqs.endswith("seq IN (SELECT value FROM json_each(:seqs))")
    assert POSTGRES.active_seqs.endswith("seq = ANY(%(seqs)s::bigint[])")
    # Keys sort in byte order on both: SQLite's default, PostgreSQL's "C" collation.
    assert SQLITE.export_scopes.endswith("ORDER BY scope_key")
    assert POSTGRES.export_scopes.endswith('ORDER BY scope_key COLLATE "C"')
