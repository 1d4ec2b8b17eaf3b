"""The remote store: a client of the Memory Worker (``scopemem serve``) over HTTP.

Reads are advisory and writes are loud: ``search`` degrades to nothing with one warning
(``search_strict`` raises), the other calls raise ``StoreError``. What is sent fits the wire
contract (``wire_query``, ``write_batch``), so no secret leaves the process and no caller's
input costs a refusal. How a call travels: ``stores.worker_transport``; the other calls:
``worker_browse`` and ``worker_calls``. Configuration and behaviour: ``docs/worker.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

import attrs

from scopemem.core.ranking import Ranking, wire_query
from scopemem.core.records import (
    MAX_USED_IDS,
    MAX_USED_SCOPES,
    Candidate,
    Kind,
    PurgeResult,
    Record,
    SweepResult,
    WriteCounts,
    from_wire,
    to_wire,
)
from scopemem.errors import ConfigError, StoreError
from scopemem.stores.base import (
    DEFAULT_RANKING,
    Hit,
    MemoryStore,
    StoreSettings,
    check_cap,
    check_scope_key,
    write_batch,
)
from scopemem.stores.health import NOT_READY_REASONS, read_ready
from scopemem.stores.retrying import DEFAULT_DEADLINE, Breaker, RetryPolicy
from scopemem.stores.worker_browse import WorkerBrowsing
from scopemem.stores.worker_calls import WorkerCalls
from scopemem.stores.worker_transport import (
    DEFAULT_TIMEOUT,
    CallFailed,
    WorkerTransport,
    WorkerUnavailable,
    in_scope,
    parsed,
    url_problem,
    whole_number,
)

__all__ = ["WorkerStore", "WorkerUnavailable"]

log = logging.getLogger("scopemem")

DEFAULT_TOKEN_ENV = "MEMORY_TOKEN"
OPTIONS = ("base_url", "token_env", "timeout_seconds", "retry_deadline_seconds")



C = TypeVar("C", WriteCounts, SweepResult)


def _counts(data: Any, cls: type[C]) -> C:
    """A count answer read with the wire's converter; ``ValueError`` for a negative count,
    which no worker can have done (it would subtract from the day counters)."""
    result = from_wire(data, cls=cls)
    negative = [field.name for field in attrs.fields(cls)
                if isinstance(value := getattr(result, field.name), int) and value < 0]
    if negative:
        raise ValueError(f"negative {', '.join(negative)}")
    return result


class WorkerStore:
    """A ``MemoryStore`` whose records live in a Memory Worker. ``cap`` (this installation's
    scope cap) is sent with every write when set, else the worker's default applies."""

    #: The worker's /import, which any token holder may call, keeps no record's ``source``
    #: (``scopemem import --trust-source`` is refused against it).
    keeps_import_source = False
    durable = True  # the worker's store outlives this process

    def __init__(self, base_url: str, token: str, *, cap: int | None = None,
                 timeout: float = DEFAULT_TIMEOUT, ranking: Ranking = DEFAULT_RANKING,
                 retry: RetryPolicy | None = None, breaker: Breaker | None = None,
                 token_source: str | None = None) -> None:
        self.transport = WorkerTransport(base_url, token, timeout=timeout, retry=retry,
                                         breaker=breaker, token_source=token_source)
        self._command = command = self.transport.command
        browsing, calls = WorkerBrowsing(command), WorkerCalls(command)
        self.scope_page, self.record_page = browsing.scope_page, browsing.record_page
        self.record_history = browsing.record_history
        self.read_count_totals = browsing.read_count_totals
        self.log_reaches, self.read_reaches = browsing.log_reaches, browsing.read_reaches
        self.add_counts, self.read_counts = calls.add_counts, calls.read_counts
        self.vectors_missing, self.put_vectors = calls.vectors_missing, calls.put_vectors
        self.nearest = calls.nearest
        self.export_scopes, self.export_page = calls.export_scopes, calls.export_page
        self.import_records = calls.import_records
        self.check_reachable = self.transport.check_reachable  # blocking, once, at startup
        self.cap = None if cap is None else check_cap(cap)
        # The worker ranks; the client reads a long query as the worker will (wire_query).
        self.ranking = ranking
        self._cap_warned = False  # a write's answer said another cap applied: warned once

    def __repr__(self) -> str:  # never the token
        return (f"WorkerStore({self.transport.base_url!r}, cap={self.cap!r}, "
                f"timeout={self.transport.timeout:g})")

    @classmethod
    def from_settings(cls, settings: StoreSettings) -> MemoryStore:
        settings = settings.named("worker")
        settings.unknown_options(OPTIONS)
        base_url = settings.options.get("base_url", "")
        problem = ("required (the Memory Worker's URL, e.g. http://127.0.0.1:8787)"
                   if "base_url" not in settings.options else url_problem(base_url))
        if problem is not None:
            raise ConfigError(f"{settings.option_key('base_url')}: {problem}")
        settings.record("base_url", base_url)
        token_env = settings.env_name_option("token_env", DEFAULT_TOKEN_ENV, "the token")
        timeout = settings.positive_number_option("timeout_seconds", DEFAULT_TIMEOUT, high=300)
        deadline = settings.positive_number_option("retry_deadline_seconds", DEFAULT_DEADLINE,
                                                   high=600)
        # Validating only the table: whether the token is there is the running process's
        # concern (config check reports it apart).
        token = settings.environ.get(token_env, "") or ("validating" * settings.validate_only)
        if not token:
            stand_in = settings.stand_in if settings.allow_fallback else None
            if stand_in is None:
                raise ConfigError(
                    f"{settings.option_key('token_env')}: ${token_env} is not set; the Memory "
                    f"Worker needs its bearer token (export {token_env}=…)")
            log.warning("[memory] %s is set but $%s is missing or empty: using the in-process"
                        " store instead of the Memory Worker, and its records will be lost on"
                        " restart", settings.option_key("base_url"), token_env)
            return stand_in(settings)
        try:
            return cls(base_url, token, cap=settings.cap, timeout=timeout,
                       ranking=settings.ranking, retry=RetryPolicy(deadline),
                       token_source=f"${token_env} ({settings.option_key('token_env')})")
        except ValueError as exc:
            raise ConfigError(f"${token_env}: {exc}") from None

    # --- the store ------------------------------------------------------------------------

    async def retrieve(self, scope_key: str, query: str, limit: int) -> list[Record]:
        return [hit.record for hit in await self.search(scope_key, query, limit)]

    async def search(self, scope_key: str, query: str, limit: int, *, bump: bool = True
                     ) -> list[Hit]:
        try:
            return await self.search_strict(scope_key, query, limit, bump=bump)
        except WorkerUnavailable as exc:  # warned once, when the breaker opened
            log.debug("[memory] %s; reading nothing from it", exc)
        except StoreError as exc:
            log.warning("[memory] %s; reading nothing from it", exc)
        return []

    async def search_strict(self, scope_key: str, query: str, limit: int, *,
                            bump: bool = True) -> list[Hit]:
        """``search``, raising ``StoreError`` where ``search`` degrades to nothing."""
        payload = _body(scopeKey=check_scope_key(scope_key),
                        query=wire_query(query, self.ranking.analyzer), limit=limit,
                        bump=None if bump else False)
        try:
            data = await self.transport.call("/retrieve", payload)
            records, matches = _hits(data, scope_key, "/retrieve")
            if matches is None:
                raise CallFailed("answered without a 'matches' list, one share a record")
        except CallFailed as exc:
            raise StoreError(f"worker /retrieve for {scope_key} failed ({exc})") from None
        return [Hit(record, match) for record, match in zip(records, matches, strict=True)]

    async def mark_used(self, used: Mapping[str, Sequence[str]]) -> int:
        """One ``/used`` call (split only past the wire's caps). Never raises: a use count
        is advisory."""
        items = [(key, list(ids)) for key, ids in used.items() if ids]
        if not items:
            return 0
        marked = 0
        for batch in _used_batches(items):
            try:
                data = await self.transport.call("/used", {"used": batch})
            except WorkerUnavailable:
                return marked
            except CallFailed as exc:
                log.warning("[memory] worker /used failed (%s); use counts not saved", exc)
                return marked
            count = data.get("marked")
            if isinstance(count, int) and not isinstance(count, bool):
                marked += count
        return marked

    async def write(self, scope_key: str, candidates: Sequence[Candidate],
                    cap: int | None = None) -> WriteCounts:
        batch, dropped, cap = write_batch(scope_key, candidates, cap, self.cap)
        if not batch:
            return dropped
        data = await self._command("/write", _body(scopeKey=scope_key, records=to_wire(batch),
                                                   cap=cap))
        applied = data.get("cap")
        # A worker's operator bounds a client's cap: said once per client (a worker that
        # predates the answer says nothing).
        if (cap is not None and not isinstance(applied, bool) and isinstance(applied, int)
                and applied != cap and not self._cap_warned):
            self._cap_warned = True
            log.warning("[memory] worker %s keeps %d records per scope, not the %d asked "
                        "(memory.max_records_per_scope); its operator bounds a client's cap "
                        "(memory.min_records_per_scope and max_records_per_scope on the "
                        "worker)", self.transport.base_url, applied, cap)
        return parsed("/write", "counts", partial(_counts, cls=WriteCounts), [data])[0] + dropped

    async def list(self, scope_key: str, limit: int, query: str | None = None,
                   kind: Kind | None = None) -> list[Record]:
        check_scope_key(scope_key)
        data = await self._command("/list", _body(
            scopeKey=scope_key, limit=limit,
            query=None if query is None else wire_query(query, self.ranking.analyzer),
            kind=None if kind is None else Kind(kind).value))
        try:
            records, _matches = _hits(data, scope_key, "/list")
        except CallFailed as exc:
            raise StoreError(f"memory worker /list failed: {exc}") from None
        if kind is not None:
            wanted = [record for record in records if record.kind == kind]
            if len(wanted) < len(records):
                log.warning("[memory] worker /list for %s answered %d record(s) of another "
                            "kind than %s (a worker older than the kind filter?); dropped",
                            scope_key, len(records) - len(wanted), Kind(kind).value)
            records = wanted
        return records

    async def forget(self, scope_key: str, record_id: str) -> bool:
        data = await self._command("/forget", {"scopeKey": check_scope_key(scope_key),
                                               "id": record_id})
        if not isinstance(forgotten := data.get("forgotten"), bool):
            raise StoreError("memory worker /forget answered without a boolean 'forgotten'")
        return forgotten

    async def sweep(self, scope_key: str, dry_run: bool = False) -> SweepResult:
        data = await self._command("/sweep", _body(scopeKey=check_scope_key(scope_key),
                                                   dryRun=dry_run or None))
        return parsed("/sweep", "a result", partial(_counts, cls=SweepResult), [data])[0]

    async def delete_scope(self, scope_key: str) -> int:
        data = await self._command("/delete-scope", {"scopeKey": check_scope_key(scope_key)})
        return whole_number(data, "/delete-scope", "deleted")

    async def scrub_provenance(self, scope_key: str, person_key: str) -> int:
        data = await self._command("/scrub-provenance", {
            "scopeKey": check_scope_key(scope_key), "personKey": check_scope_key(person_key)})
        return whole_number(data, "/scrub-provenance", "scrubbed")

    async def purge(self) -> PurgeResult:
        data = await self._command("/purge", {})
        return PurgeResult(whole_number(data, "/purge", "purged"),
                           whole_number(data, "/purge", "scrubbed"))

    async def ready(self) -> str | None:
        """The worker's own readiness (``GET /readyz``), which a read can miss (a SQLite
        shard replaced under it refuses writes, not reads); only its fixed reasons are
        passed on, never a body's text."""
        status, data = await self.transport.probe("/readyz")
        if status == 404:  # a worker that predates the route: read as any store is
            return await read_ready(self)
        if 200 <= status < 300:
            # /readyz takes no token: a read with ours says whether the worker lets us in.
            return await read_ready(self)
        reason = None if data is None else data.get("error")
        if reason in NOT_READY_REASONS:
            return f"the memory worker's store: {reason}"
        return f"the memory worker answered {status} to /readyz"

    async def close(self) -> None:
        await self.transport.close()


def _hits(data: dict[str, Any], scope_key: str, route: str
          ) -> tuple[list[Record], list[float] | None]:
    """The reply's well-formed records of ``scope_key`` (one warning says how many others
    were dropped), each one's match (None when the reply has no usable ``matches``, as
    ``/list``'s never has)."""
    items = data.get("records")
    if not isinstance(items, list):
        raise CallFailed("answered without a 'records' list")
    raw = data.get("matches")
    usable = (isinstance(raw, list) and len(raw) == len(items)
              and all(isinstance(m, int | float) and not isinstance(m, bool)
                      and 0.0 <= m <= 1.0 for m in raw))
    parse = in_scope(scope_key)
    records: list[Record] = []
    matches: list[float] = []
    for n, item in enumerate(items):
        try:
            records.append(parse(item))
        except ValueError:
            continue
        if usable:
            matches.append(float(raw[n]))  # type: ignore[index]
    if len(records) < len(items):
        log.warning("[memory] worker %s for %s: dropped %d malformed record(s)", route,
                    scope_key, len(items) - len(records))
    return records, matches if usable else None


def _body(**fields: Any) -> dict[str, Any]:
    """A request's body: the wire omits an absent field (None here)."""
    return {name: value for name, value in fields.items() if value is not None}


def _used_batches(items: list[tuple[str, list[str]]]) -> list[list[dict[str, Any]]]:
    """``items`` in requests within ``MAX_USED_SCOPES`` scopes and ``MAX_USED_IDS`` ids."""
    batches: list[list[dict[str, Any]]] = [[]]
    ids = 0
    for key, item_ids in items:
        for start in range(0, len(item_ids), MAX_USED_IDS):
            chunk = item_ids[start:start + MAX_USED_IDS]
            if len(batches[-1]) >= MAX_USED_SCOPES or ids + len(chunk) > MAX_USED_IDS:
                batches.append([])
                ids = 0
            batches[-1].append({"scopeKey": key, "ids": chunk})
            ids += len(chunk)
    return batches
