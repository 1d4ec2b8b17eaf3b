"""The in-process store's retention, as the SQL stores': a superseded or evicted row is
dropped once dead ``retention_days``, a swept one scrubbed and kept; a forgotten row is
scrubbed at once (``scrubbed``), and kept.
"""

from __future__ import annotations

from collections.abc import MutableMapping

from scopemem.core.records import PurgeResult, Record, Status, trusted_record
from scopemem.stores.base import retention_cutoff

__all__ = ["PURGEABLE", "Retention", "scrubbed"]

# The statuses whose rows the retention acts on (a forgotten row is scrubbed at once).
PURGEABLE = frozenset({Status.SUPERSEDED, Status.EVICTED, Status.SWEPT})


def scrubbed(record: Record, status: Status = Status.FORGOTTEN) -> Record:
    """``record`` with ``status`` and no text or keywords (built without the validators: a
    stored row was validated when written)."""
    return trusted_record(record.id, record.scope_key, record.kind, "", (),
                          record.source_thread_key, record.source_run_id, record.created_at,
                          record.last_used_at, record.use_count, record.confidence,
                          record.supersedes, record.restates, status, record.source)


class Retention:
    """The purge past ``retention_days``, over ``died`` (the store's: record id → when it
    died), which every write and ``purge`` consult."""

    def __init__(self, retention_days: int, died: MutableMapping[str, int]) -> None:
        self.retention_days = retention_days
        self._died = died

    def purged(self, rows: list[Record], now: int) -> list[Record]:
        """Note when the rows that just died did, and apply the retention to ``rows`` (a
        scrubbed swept row has no text left to wait for)."""
        died = self._died
        cutoff = retention_cutoff(now, self.retention_days)
        kept = []
        for record in rows:
            if record.status in PURGEABLE and record.text:
                when = died.setdefault(record.id, now)
                if when <= cutoff:
                    del died[record.id]
                    if record.status is not Status.SWEPT:
                        continue
                    record = scrubbed(record, Status.SWEPT)
            kept.append(record)
        return kept

    def purge(self, scopes: MutableMapping[str, list[Record]], now: int
              ) -> tuple[PurgeResult, list[str]]:
        """The purge applied to every scope now: what it did, and the scopes it changed."""
        result = PurgeResult()
        changed = []
        for scope_key, rows in list(scopes.items()):
            swept = sum(1 for r in rows if r.status is Status.SWEPT and r.text)
            kept = self.purged(rows, now)
            left = sum(1 for r in kept if r.status is Status.SWEPT and r.text)
            if len(kept) == len(rows) and left == swept:
                continue
            scopes[scope_key] = kept
            changed.append(scope_key)
            result += PurgeResult(purged=len(rows) - len(kept), scrubbed=swept - left)
        return result, changed
