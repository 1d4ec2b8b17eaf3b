"""Moving records between stores: the ``PortableStore`` capability and the helpers on it.
``export_records`` streams a scope (or every scope) through ``export_page``, one page in
memory at a time. ``group_import`` is the check every store runs first.

What an import promises, on every store:

- A record whose id already exists in its scope is skipped, so importing a file twice adds
  nothing the second time (a record whose row the retention purged since is added again).
- Ids keep their seq, and the scope's next id stays above every seq it holds, so a write
  after an import never collides with an imported id.
- A record whose id names another scope than its ``scopeKey`` is refused
  (``StoreRefused``), as is one beyond the shared caps (``core.porting.record_problem``),
  one claiming more than ``MAX_USE_COUNT`` uses, or a time after the store's clock plus
  ``MAX_CLOCK_SKEW_MS``: the whole call is refused before anything is written.
- Every record passes the screen every write passes (``stores.base.fit_batch``): secrets
  in its text, keywords and provenance are redacted, and it is fitted to the record
  contract, so an import never stores what a write would not. An active fact that the
  status gate refuses is imported as ``swept``, as ``sweep`` would leave it: kept for the
  audit, never retrieved. A record the write screen drops is not imported.
- ``source`` is kept as given: deciding whether an importer may vouch for ``human`` is the
  caller's (``scopemem import --trust-source``; the worker's /import never does).
- Nothing is evicted or deduplicated: active records beyond the scope's cap stay until the
  next write to that scope evicts down to the cap, and two active records with one text
  stay two. A dead record (superseded, evicted, swept) keeps its text for the retention
  counted from the import; a forgotten one is scrubbed.
- Each scope of a call is one transaction on a durable store: all its records or none.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from scopemem.core.engine import plan_sweep
from scopemem.core.porting import record_problem, record_seq_of, scrub
from scopemem.core.records import MAX_EXPORT_PAGE, Candidate, Record
from scopemem.errors import StoreError, StoreRefused, StoreUnsupported
from scopemem.stores.base import MemoryStore, check_scope_key, fit_batch

__all__ = ["ImportScreen", "PortableStore", "export_records", "group_import", "import_by_scope",
           "import_threads", "portable", "screen_import"]

# What a forgotten record (scrubbed: no text) shows the write screen, so that its
# provenance is screened as any other record's; its text stays empty.
_SCRUBBED_TEXT = "forgotten record"


@runtime_checkable
class PortableStore(Protocol):
    """A store whose records can be exported and imported with every field kept."""

    async def export_scopes(self) -> list[str]:
        """Every scope key the store holds, sorted: the in-process store's scopes holding
        records, the SQL stores' every row of their ``scopes`` table (a scope only counted,
        or deleted and kept emptied, included: its export is empty)."""

    async def export_page(self, scope_key: str, after: int, limit: int) -> list[Record]:
        """Up to ``limit`` of the scope's records (any status, every field, use counts as of
        now) with a seq above ``after``, in seq order. Never bumps usage."""

    async def import_records(self, records: Sequence[Record]) -> int:
        """Add the records whose id their scope lacks, keeping id, seq, status, times,
        counts and pointers (see the module's promises); how many were added. Raises
        ``StoreRefused`` before writing anything if one is refused."""


def portable(store: MemoryStore, name: str | None = None) -> PortableStore:
    """``store`` as a ``PortableStore``; ``StoreUnsupported`` saying so when it is not one
    (the null store keeps nothing to move)."""
    if isinstance(store, PortableStore):
        return store
    label = f"memory.store = {name!r}" if name else type(store).__name__
    raise StoreUnsupported(f"{label} cannot export or import records"
                     " (the memory, sqlite, postgres and worker stores can)")


async def export_records(store: PortableStore, scope_key: str | None = None, *,
                         page: int = MAX_EXPORT_PAGE) -> AsyncGenerator[Record, None]:
    """Every record of ``scope_key`` (every scope's, scope keys sorted, when None), in id
    order within a scope, fetched ``page`` records at a time (at most ``MAX_EXPORT_PAGE``,
    what the worker serves). A page out of seq order is a ``StoreError``, never a loop."""
    page = max(1, min(page, MAX_EXPORT_PAGE))
    scopes = [check_scope_key(scope_key)] if scope_key is not None else \
        await store.export_scopes()
    for key in scopes:
        after = 0
        while True:
            records = await store.export_page(key, after, page)
            for record in records:
                seq = record_seq_of(record)
                if seq is None or seq <= after or record.scope_key != key:
                    raise StoreError(f"export of {key}: {record.id!r} is not the next of"
                                     " its records (out of order or another scope's)")
                after = seq
                yield record
            if len(records) < page:
                break


@attrs.frozen
class ImportScreen:
    """An import call's records as a store keeps them (``records``, in the call's order),
    and what the screen changed: ``redacted`` records had a secret in their text, keywords
    or provenance replaced (or a field fitted to the record contract), ``swept`` active
    facts were refused by the status gate and are kept swept."""

    records: tuple[Record, ...]
    redacted: int = 0
    swept: int = 0


def _screened(record: Record) -> Record:
    """``record`` through the write screen (``fit_batch``, one record for one)."""
    candidate = Candidate(kind=record.kind, text=record.text or _SCRUBBED_TEXT,
                          source_thread_key=record.source_thread_key,
                          source_run_id=record.source_run_id, keywords=record.keywords,
                          confidence=record.confidence, supersedes=record.supersedes,
                          restates=record.restates, source=record.source)
    [screened] = fit_batch([candidate])
    if screened is candidate:
        return record
    return attrs.evolve(record, text=screened.text if record.text else "",
                        keywords=screened.keywords or (),
                        source_thread_key=screened.source_thread_key,
                        source_run_id=screened.source_run_id)


def screen_import(records: Sequence[Record], now: int) -> ImportScreen:
    """The records checked against the caps and the clock ``now`` (``record_problem``),
    scrubbed, screened as every write is (``fit_batch``) and, for an active fact, by the
    status gate a sweep applies (``core.engine.plan_sweep``). ``StoreRefused`` naming the
    first record that cannot be imported. Screening a screened call changes nothing."""
    kept: list[Record] = []
    redacted = swept = 0
    for n, record in enumerate(records):
        problem = record_problem(record, now)
        if problem is not None:
            raise StoreRefused(f"import: record {n}: {problem}")
        record = scrub(record)
        screened = _screened(record)
        redacted += screened is not record
        retired = plan_sweep([screened])
        swept += bool(retired)
        kept.append(retired[0] if retired else screened)
    return ImportScreen(tuple(kept), redacted, swept)


def group_import(records: Sequence[Record], now: int) -> dict[str, list[tuple[int, Record]]]:
    """The records of an import call by scope, each with its seq, checked and screened
    (``screen_import``, against the store's clock ``now``); the first of two records with
    one id wins. ``StoreRefused`` naming the record when one cannot be imported (nothing is
    written then)."""
    groups: dict[str, dict[int, Record]] = {}
    for record in screen_import(records, now).records:
        seq = record_seq_of(record)
        assert seq is not None  # record_problem checked it
        groups.setdefault(record.scope_key, {}).setdefault(seq, record)
    return {key: sorted(batch.items()) for key, batch in groups.items()}


async def import_by_scope(groups: Mapping[str, list[tuple[int, Record]]],
                          import_scope: Callable[[str, list[tuple[int, Record]]],
                                                 Awaitable[int]]) -> int:
    """``group_import``'s groups imported one scope (one transaction) at a time by
    ``import_scope``: the records added. A ``StoreError`` on the way carries in
    ``imported`` what the scopes before it added, which stay written."""
    added = 0
    try:
        for scope_key, batch in groups.items():
            added += await import_scope(scope_key, batch)
    except StoreError as exc:
        exc.imported = added
        raise
    return added


def import_threads(added: Sequence[tuple[int, Record]], beside: Mapping[int, Sequence[Any]]
                   ) -> tuple[dict[int, bool], list[int]]:
    """What an import posts, from the rows beside the ``added`` ones once they are in (by
    seq: thread key, status): each active added record's seq and whether it continues the
    row before it (of its thread), and the existing active rows right after an added one of
    their thread, which continue it now."""
    seqs = {seq for seq, _record in added}
    continues: dict[int, bool] = {}
    follows: list[int] = []
    for seq, record in added:
        thread = record.source_thread_key
        before, after = beside.get(seq - 1), beside.get(seq + 1)
        if record.is_active:
            continues[seq] = before is not None and before[0] == thread
        if (after is not None and seq + 1 not in seqs and after[0] == thread
                and after[1] == "active"):
            follows.append(seq + 1)
    return continues, follows
