"""The statements both SQL stores run, written once: ``Statements(dialect)`` renders them in
SQLite's (``sqlite_shared.dialect.SQL``) or PostgreSQL's (``postgres.dialect.of(schema)``)
spelling. What each store writes alone stays in its package; ``docs/storage.md`` ("One SQL
shape") lists both. Every statement names the scope as a bound value in its WHERE clause.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from scopemem.core.provenance import scrub_source
from scopemem.core.text import sanitize_field
from scopemem.errors import StoreError
from scopemem.stores.shared.dialect import Dialect

__all__ = ["COLUMNS", "R_COLUMNS", "Migration", "Statements", "foreign_row", "scrubbed_sources"]

# The seq, then the record's fields in ``Record``'s order (positions 1-15).
COLUMNS = ("seq, id, scope_key, kind, text, keywords, source_thread_key, source_run_id,"
           " created_at, last_used_at, use_count, confidence, supersedes, restates, status,"
           " source")


@attrs.frozen
class Migration:
    """A SQL schema's version, applied in one transaction: ``columns`` (table, column,
    definition) added where missing, then ``statements`` (each safe to repeat), then
    ``once`` (backfills) only when the version is first applied."""

    version: int
    name: str
    statements: tuple[str, ...]
    columns: tuple[tuple[str, str, str], ...] = ()
    once: tuple[str, ...] = ()


def foreign_row(row: Sequence[Any], problem: str, where: str) -> StoreError:
    """The error of a row of ``COLUMNS`` that is not a record the store writes
    (``records.stored_record_problem``): another program wrote it into ``where``."""
    return StoreError(f"{sanitize_field(str(row[2]))}'s row {row[0]} is not a record this"
                      f" store writes ({sanitize_field(problem)[:200]}): written into its"
                      f" {where} by another program; delete or repair the row")


R_COLUMNS = ", ".join(f"r.{column.strip()}" for column in COLUMNS.split(","))  # as ``r``
PURGEABLE = "('superseded', 'evicted', 'swept')"


class Statements:
    """The shared statements in one dialect, as attributes named for what they do."""

    def __init__(self, d: Dialect) -> None:
        self.dialect = d
        v, t = d.value, d.table
        records, scopes = t("records"), t("scopes")
        scope = f"scope_key = {v('scope')}"
        active = f"{scope} AND status = 'active'"
        in_seqs = d.any_of("seq", "seqs", "bigint")
        # Rows of records to hand to the engine, after the dialect's lead.
        rows = f"SELECT {d.lead}{COLUMNS} FROM {records}"

        # --- the rows of a scope -----------------------------------------------------------
        self.active_seqs = f"SELECT seq FROM {records} WHERE {active} AND {in_seqs}"
        self.active_rows = f"{rows} WHERE {active} AND {in_seqs}"
        self.active_facts = (f"SELECT {COLUMNS} FROM {records} WHERE {active}"
                             " AND kind = 'fact' ORDER BY seq")
        # Each active record's last touch when a copy of the scope's index is read: a lower
        # bound ever after (a use only moves it on), which is all ``core.topk`` needs.
        self.scope_touches = (f"SELECT seq, coalesce(last_used_at, created_at) FROM {records}"
                              f" WHERE {active}")

        # --- a scope's counts: every change moves its change counter (``generation``) ------
        self.count_scopes = f"SELECT count(*) FROM {scopes}"
        self.set_counts = (f"UPDATE {scopes} SET last_seq = {v('last')}, active = {v('active')},"
                           f" generation = generation + 1 WHERE {scope}")
        self.add_active = (f"UPDATE {scopes} SET active = active + {v('delta')},"
                           f" generation = generation + 1 WHERE {scope}")
        self.next_generation = f"UPDATE {scopes} SET generation = generation + 1 WHERE {scope}"
        # Deleting a scope's data: its row stays, emptied, with its last seq, so no id it
        # gave is given again.
        self.delete_records = f"DELETE FROM {records} WHERE {scope}"
        self.empty_scope = (f"UPDATE {scopes} SET active = 0, generation = generation + 1,"
                            f" last_write = NULL WHERE {scope}")

        # --- retiring rows ----------------------------------------------------------------
        self.retire = (f"UPDATE {records} SET status = {v('status')}, retired_at = {v('now')}"
                       f" WHERE {active} AND {in_seqs} RETURNING seq")
        self.forget = (f"UPDATE {records} SET status = 'forgotten', retired_at = {v('now')},"
                       f" text = '', norm = '', keywords = {d.no_keywords},"
                       f" tokens = {d.no_tokens} WHERE {active} AND seq = {v('seq')}"
                       f" AND id = {v('id')}")
        # The eviction's two short reads (``batches.pick_eviction``): what its order reads.
        lru = f"SELECT seq, last_used_at, created_at FROM {records} WHERE {active}"
        self.lru_never_used = (f"{lru} AND last_used_at IS NULL ORDER BY created_at, seq"
                               f" LIMIT {v('excess')}")
        self.lru_used = (f"{lru} AND last_used_at IS NOT NULL"
                         f" ORDER BY last_used_at, created_at, seq LIMIT {v('excess')}")
        # The retention, oldest death first: a swept row past it keeps its id, status,
        # provenance, times and counts, never its text (nor its ``retired_at``, so the
        # retention never reads it again); a superseded or evicted row is deleted.
        due = (f" (SELECT seq FROM {records} WHERE {scope} AND status IN {PURGEABLE}"
               f" AND retired_at <= {v('cutoff')} AND status {{}} 'swept'"
               f" ORDER BY retired_at LIMIT {v('rows')})")
        self.scrub_swept = (f"UPDATE {records} SET text = '', norm = '',"
                            f" keywords = {d.no_keywords}, tokens = {d.no_tokens},"
                            f" retired_at = NULL WHERE {scope} AND seq IN" + due.format("="))
        self.purge = f"DELETE FROM {records} WHERE {scope} AND seq IN" + due.format("!=")
        # Scrubbing a person out of a scope's provenance: the rows naming them, then each
        # row's new values.
        run = "coalesce(source_run_id, '')"
        self.naming = (f"SELECT seq, source_thread_key, source_run_id FROM {records}"
                       f" WHERE {scope} AND ({d.holds('source_thread_key', v('person'))}"
                       f" OR {d.holds(run, v('person'))})")
        p = d.positional
        self.set_source = (f"UPDATE {records} SET source_thread_key = {p},"
                           f" source_run_id = {p} WHERE scope_key = {p} AND seq = {p}")

        # --- moving records in and out (``stores.porting``) --------------------------------
        self.export_scopes = f"SELECT scope_key FROM {scopes} ORDER BY {d.key()}"
        self.export_page = (f"{rows} WHERE {scope} AND seq > {v('after')} ORDER BY seq"
                            f" LIMIT {v('limit')}")
        self.held_seqs = f"SELECT seq FROM {records} WHERE {scope} AND {in_seqs}"
        self.neighbours = (f"SELECT seq, source_thread_key, status, tokens FROM {records}"
                           f" WHERE {scope} AND {in_seqs}")
        self.import_counts = (f"UPDATE {scopes} SET last_seq = {d.greatest}(last_seq,"
                              f" {v('last')}), active = active + {v('added')},"
                              f" generation = generation + 1 WHERE {scope}")

        # --- counters ---------------------------------------------------------------------
        prefix = v("prefix", "text")
        counts = (f"SELECT scope_key, day, name, value FROM {t('counters')}"
                  f" WHERE day >= {v('since')} AND ({prefix} IS NULL"
                  f" OR {d.starts('scope_key', prefix)})")
        order = " ORDER BY scope_key, day, name"
        # Two statements, not one with "keys IS NULL OR": a prepared statement's generic plan
        # cannot use the primary key for the keys, and would scan every scope's counters.
        self.read_counts = counts + order
        # The named scopes' counters: a primary-key range each, never another scope's.
        self.read_counts_of = f"{counts} AND {d.any_of('scope_key', 'keys', 'text')}{order}"

        # --- browsing (``stores.browsing``) -----------------------------------------------
        # Scopes holding a record, of a kind's range of keys or all, in a page's order
        # (``scope_page``), and how many.
        held = (f" WHERE last_write IS NOT NULL AND ({v('low', 'text')} IS NULL"
                f" OR {d.key()} >= {v('low', 'text')} AND {d.key()} < {v('high', 'text')})")
        self._scopes = f"SELECT scope_key, active, last_write FROM {scopes}{held}"
        self._sorts = {"key": (d.key(),), "active": ("active", d.key()),
                       "last_write": ("last_write", d.key())}
        self.count_held = f"SELECT count(*) FROM {scopes}{d.using('scopes_by_last_write')}{held}"
        self.count_totals = (f"SELECT day, name, total, peak FROM {t('count_totals')}"
                             f" WHERE kind = {v('kind')} AND day >= {v('since')}"
                             " AND total > 0 ORDER BY day, name")
        # A page of a scope's records, newest first: the seqs from ``records_browse``, then
        # only the page's rows.
        filters = (f"{scope} AND ({v('kind', 'text')} IS NULL OR kind = {v('kind', 'text')})"
                   f" AND ({v('status', 'text')} IS NULL OR status = {v('status', 'text')})"
                   f" AND ({v('source', 'text')} IS NULL OR source = {v('source', 'text')})")
        self.record_page = (f"{rows} WHERE {scope} AND seq IN (SELECT seq FROM {records}"
                            f"{d.using('records_browse')} WHERE {filters} ORDER BY seq DESC"
                            f" LIMIT {v('limit')} OFFSET {v('offset')}) ORDER BY seq DESC")
        self.count_records = (f"SELECT count(*) FROM {records}{d.using('records_browse')}"
                              f" WHERE {filters}")
        # A record's history: the record it supersedes (a primary-key lookup each), the
        # newest superseding it, the newest restating it (the partial indexes), their rows.
        self.pointers = (f"SELECT supersedes, status FROM {records} WHERE {scope}"
                         f" AND seq = {v('seq')} AND id = {v('id')}")
        self.superseded_by = (f"SELECT seq FROM {records} WHERE {scope}"
                              f" AND supersedes = {v('id')} AND supersedes IS NOT NULL"
                              " ORDER BY seq DESC LIMIT 1")
        self.restated_by = (f"SELECT seq FROM {records} WHERE {scope} AND restates = {v('id')}"
                            f" AND restates IS NOT NULL ORDER BY seq DESC LIMIT {v('most')}")
        self.rows = f"{rows} WHERE {scope} AND {in_seqs}"

        # --- the reaches (``core.browse.Reach``) -------------------------------------------
        reaches = t("reaches")
        self.prune_reaches = f"DELETE FROM {reaches} WHERE at <= {v('cutoff')}"
        self.drop_reaches = f"DELETE FROM {reaches} WHERE {scope}"
        newest = (f" ORDER BY at DESC, {d.key()} DESC, seq DESC, {d.key('run_id')} DESC,"
                  f" {d.key('thread_key')} DESC LIMIT {v('limit')}")
        reach = (f"SELECT scope_key, seq, run_id, thread_key, at FROM {reaches}"
                 f" WHERE at > {v('after')}")
        self.reaches_of_record = f"{reach} AND {scope} AND seq = {v('seq')}{newest}"
        self.reaches_of_run = (f"{reach} AND (run_id = {v('run')} OR thread_key = {v('run')})"
                               f"{newest}")
        self.all_reaches = f"{reach}{newest}"

        # --- vectors (``stores.shared.vectors``) ------------------------------------------
        vectors = t("vectors")
        self.vectors_missing = (
            f"SELECT id, text FROM {records} r WHERE r.scope_key = {v('scope')}"
            f" AND r.status = 'active' AND NOT EXISTS (SELECT 1 FROM {vectors} v"
            f" WHERE v.scope_key = r.scope_key AND v.seq = r.seq AND v.model = {v('model')})"
            f" ORDER BY r.seq LIMIT {v('limit')}")
        of_model = (f"FROM {vectors}{d.using('vectors_by_model')} WHERE {scope}"
                    f" AND model = {v('model')}")
        self.dimensions = f"SELECT length(vector) / 4 {of_model} LIMIT 1"
        self.of_model = f"SELECT seq, vector {of_model} ORDER BY seq"
        # What a copy of a scope's vectors was read at (``shared.nearest.Matrices``).
        self.generation = f"SELECT generation FROM {scopes} WHERE {scope}"

    def scope_page(self, sort: str, descending: bool) -> str:
        """Scopes in a page's order (``stores.browsing.scope_args`` checked ``sort``)."""
        direction = " DESC" if descending else ""
        order = ", ".join(f"{column}{direction}" for column in self._sorts[sort])
        v = self.dialect.value
        return f"{self._scopes} ORDER BY {order} LIMIT {v('limit')} OFFSET {v('offset')}"


def scrubbed_sources(rows: Sequence[Sequence[Any]], scope_key: str, person: str
                     ) -> list[tuple[Any, ...]]:
    """The values of ``Statements.set_source`` for the rows ``naming`` found (seq, thread
    key, run id) that name ``person`` (``core.provenance.scrub_source``)."""
    changed = []
    for seq, thread, run in rows:
        new_thread, new_run = scrub_source(thread, person), scrub_source(run, person)
        if new_thread is not thread or new_run is not run:
            changed.append((new_thread, new_run, scope_key, seq))
    return changed
