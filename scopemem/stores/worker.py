"""The remote store: a client of the Memory Worker (``scopemem serve``) over HTTP.

Reads are advisory and writes are loud. ``retrieve`` never raises: a refusal, a body that is
not JSON, a transport error or a timeout costs the caller that scope's records and one
``[memory]`` warning, and malformed records in an otherwise good reply are dropped one by one
(``retrieve_strict`` is the same call raising instead, for a caller that must say a scope
failed). ``write``, ``list``, ``forget`` and ``sweep`` raise ``StoreError`` naming the route,
the status and the server's reason, because an empty answer there would be a lie to a person;
a body the worker refuses (400, 413) raises its subclass ``StoreRefused``, and a write to a new
scope beyond the worker's limit on scopes (507) ``ScopeLimitReached``, as the SQLite store
itself would.

What is sent always fits the wire contract the worker checks: a query longer than
``MAX_QUERY_CHARS`` goes as its distinct tokens (``engine.wire_query``, which every store reads
exactly as the whole query), and every candidate is redacted and fitted first
(``fit_batch``: secrets, text, keyword and provenance caps, a thread key, no NUL) and noise
dropped (``salient_batch``), so no secret leaves the process and a long brief or one odd
candidate never costs a scope's records or a batch.
Records of another kind than a ``list`` asked for are dropped, whatever an older worker that
ignores ``kind`` returns.

Configuration (``[memory.stores.worker]``)::

    base_url = "http://127.0.0.1:8787"   # required, http or https
    token_env = "MEMORY_TOKEN"           # the environment variable holding the bearer
    timeout_seconds = 5                  # per attempt, total
    retry_deadline_seconds = 10          # all attempts of one call, waits included

Transient failures are retried (``stores.retrying``: connection errors, a dropped connection,
503 and 429 honouring ``Retry-After``, timeouts) with exponential backoff and jitter, within
``retry_deadline_seconds``; a read that cannot connect at all (nobody listens) is not
retried, so the per-turn block degrades at once. Every request that changes something
(/write, /used, /forget, /sweep, /import, /counts) carries an ``Idempotency-Key`` made for
that call and reused by its retries, so a write whose answer was lost is answered from the
worker's memory of it rather than applied twice. After ``BREAKER_THRESHOLD`` calls in a row
failed that way, the client stops calling for ``BREAKER_COOL_DOWN`` seconds (reads return
nothing, writes raise ``WorkerUnavailable``; one warning when it opens), then tries again.
No redirect is followed: a 3xx is an error like any other answer the worker never gives.

With ``base_url`` set but the token variable missing or empty, a long-running process (a
bot: ``StoreSettings.allow_fallback``) gets the in-process store instead (the host's
``StoreSettings.stand_in``), with one warning that its records die with the process; a
short-lived command gets a ``ConfigError`` naming the variable, since a store that dies with
the command would lose everything it was told.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scopemem import tracing
from scopemem.core.porting import record_from_wire
from scopemem.core.ranking import Ranking, query_terms, wire_query
from scopemem.core.records import (
    MAX_EXPORT_PAGE,
    MAX_IMPORT_BATCH,
    MAX_IMPORT_BYTES,
    MAX_SCOPES_PAGE,
    MAX_USED_IDS,
    MAX_USED_SCOPES,
    Candidate,
    Kind,
    PurgeResult,
    Record,
    SweepResult,
    WireError,
    WriteCounts,
    from_wire,
    to_wire,
)
from scopemem.core.scoring import keyword_match
from scopemem.errors import (
    ConfigError,
    ScopeLimitReached,
    StoreError,
    StoreRefused,
    StoreUnsupported,
)
from scopemem.stores.base import (
    DEFAULT_RANKING,
    Hit,
    MemoryStore,
    StoreSettings,
    check_cap,
    check_scope_key,
    salient_batch,
    wall_clock_ms,
)
from scopemem.stores.porting import group_import
from scopemem.stores.retrying import (
    DEFAULT_DEADLINE,
    TRANSIENT_STATUSES,
    Breaker,
    BreakerOpen,
    RetryPolicy,
    Transient,
    retry_after,
)
from scopemem.stores.worker_browse import WorkerBrowsing
from scopemem.stores.worker_vectors import WorkerVectors

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger("scopemem")

DEFAULT_TOKEN_ENV = "MEMORY_TOKEN"
DEFAULT_TIMEOUT = 5.0
# The largest reply read: 50 records of 4000 characters are well under it.
MAX_REPLY_BYTES = 8 * 1024 * 1024
OPTIONS = ("base_url", "token_env", "timeout_seconds", "retry_deadline_seconds")
#: The header naming one call across its retries; the worker answers a replay with the
#: first answer (``worker_aiohttp.idempotency``).
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: The routes that change something: each call carries an idempotency key.
KEYED_ROUTES = frozenset({"/write", "/used", "/forget", "/sweep", "/import", "/counts",
                          "/delete-scope", "/scrub-provenance", "/purge", "/log-reaches"})
BREAKER_THRESHOLD = 5
BREAKER_COOL_DOWN = 30.0


class WorkerUnavailable(StoreError):
    """The client's breaker is open: the worker failed too often lately; nothing was sent."""


class _CallFailed(Exception):
    """One call that produced no usable JSON object; the message says why, ``status``
    is the worker's answer (None when there was none), ``transient`` whether it failed in a
    way a later call may not (after its retries)."""

    def __init__(self, message: str, status: int | None = None, *,
                 transient: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.transient = transient


# Answers that refuse the body itself: sending it again would be refused again.
_REFUSED_BODY = (400, 413)


def _check_token(token: str) -> str:
    if not token or not all(0x21 <= ord(char) <= 0x7E for char in token):
        raise ValueError("the bearer token must be non-empty printable ASCII without spaces")
    return token


def _url_problem(base_url: object) -> str | None:
    if not isinstance(base_url, str) or not base_url:
        return "must be a non-empty string"
    try:
        parts = urlsplit(base_url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"must be an http:// or https:// URL with a host, got {base_url!r}"
    if parts.query or parts.fragment:
        return "must not have a query or a fragment"
    return None


class WorkerStore(WorkerBrowsing, WorkerVectors):
    """A ``MemoryStore`` whose records live in a Memory Worker.

    One ``aiohttp.ClientSession`` per store, created on first use on the running event loop
    and closed by ``close()``. Every request carries the bearer and has ``timeout`` seconds in
    total. ``cap`` (the scope cap configured for this installation) is sent with every write
    when set; otherwise the worker's own default applies."""

    #: The worker's /import, which any token holder may call, keeps no record's ``source``:
    #: every imported record arrives reflection-sourced (``scopemem import --trust-source``
    #: is refused against it).
    keeps_import_source = False
    durable = True  # the worker's store outlives this process

    def __init__(self, base_url: str, token: str, *, cap: int | None = None,
                 timeout: float = DEFAULT_TIMEOUT, ranking: Ranking = DEFAULT_RANKING,
                 retry: RetryPolicy | None = None, breaker: Breaker | None = None) -> None:
        problem = _url_problem(base_url)
        if problem is not None:
            raise ValueError(f"base_url {problem}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.base_url = base_url.rstrip("/")
        self._token = _check_token(token)
        self.cap = None if cap is None else check_cap(cap)
        self.timeout = float(timeout)
        self.retry = retry if retry is not None else RetryPolicy(DEFAULT_DEADLINE)
        self.breaker = breaker if breaker is not None else Breaker(BREAKER_THRESHOLD,
                                                                   BREAKER_COOL_DOWN)
        # The worker ranks; the client reads a long query as the worker will (wire_query)
        # and, facing a worker that predates matches, scores them itself.
        self.ranking = ranking
        # A worker that answered a retrieval without ``bumped`` predates "used means
        # shown": it bumps what it returns, so there is nothing for /used to mark.
        self._legacy = False
        # Whether the worker's answer to a write said it applied another cap (warned once).
        self._cap_warned = False
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:  # never the token
        return f"WorkerStore({self.base_url!r}, cap={self.cap!r}, timeout={self.timeout:g})"

    @classmethod
    def from_settings(cls, settings: StoreSettings) -> MemoryStore:
        settings = settings.named("worker")
        settings.unknown_options(OPTIONS)
        options = settings.options
        if "base_url" not in options:
            raise ConfigError(f"{settings.option_key('base_url')}: required "
                              "(the Memory Worker's URL, e.g. http://127.0.0.1:8787)")
        base_url = options["base_url"]
        problem = _url_problem(base_url)
        if problem is not None:
            raise ConfigError(f"{settings.option_key('base_url')}: {problem}")
        settings.record("base_url", base_url)
        token_env = settings.string_option("token_env", DEFAULT_TOKEN_ENV)
        timeout = settings.positive_number_option("timeout_seconds", DEFAULT_TIMEOUT, high=300)
        deadline = settings.positive_number_option("retry_deadline_seconds", DEFAULT_DEADLINE,
                                                   high=600)
        token = settings.environ.get(token_env, "")
        if settings.validate_only:
            # Only the table was asked about; whether the token is there is the running
            # process's concern (config check reports it apart).
            token = token or "validating"
        if not token:
            stand_in = settings.stand_in if settings.allow_fallback else None
            if stand_in is None:
                raise ConfigError(
                    f"{settings.option_key('token_env')}: ${token_env} is not set; the Memory "
                    f"Worker needs its bearer token (export {token_env}=…)")
            log.warning(
                "[memory] %s is set but $%s is missing or empty: using the in-process store "
                "instead of the Memory Worker, and its records will be lost on restart",
                settings.option_key("base_url"), token_env,
            )
            return stand_in(settings)
        try:
            return cls(base_url, token, cap=settings.cap, timeout=timeout,
                       ranking=settings.ranking, retry=RetryPolicy(deadline))
        except ValueError as exc:
            raise ConfigError(f"${token_env}: {exc}") from None

    def check_reachable(self) -> None:
        """One blocking ``GET /healthz`` within ``timeout`` seconds, for a process that must
        not start without its worker (``memory.fallback = "refuse"``): ``StoreError`` unless
        it answers 200. Blocking on purpose: it runs once, at startup, before any loop."""
        import http.client

        parts = urlsplit(self.base_url)
        connection = (http.client.HTTPSConnection if parts.scheme == "https"
                      else http.client.HTTPConnection)(parts.netloc, timeout=self.timeout)
        try:
            connection.request("GET", parts.path + "/healthz")
            status = connection.getresponse().status
        except (OSError, http.client.HTTPException) as exc:
            raise StoreError(f"memory worker {self.base_url} is not reachable: "
                             f"{type(exc).__name__}: {exc}") from None
        finally:
            connection.close()
        if status != 200:
            raise StoreError(f"memory worker {self.base_url} answered {status} to /healthz")

    # --- transport ------------------------------------------------------------------------

    def _session_for_loop(self) -> aiohttp.ClientSession:
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            self._session = aiohttp.ClientSession(
                headers={"Authorization": f"Bearer {self._token}"},
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            )
            self._session_loop = loop
        return self._session

    async def _call(self, route: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST ``payload`` to ``route``, retried within the deadline; the reply's JSON
        object, or ``_CallFailed`` (``WorkerUnavailable`` while the breaker is open)."""
        try:
            self.breaker.check()
        except BreakerOpen as exc:
            raise WorkerUnavailable(f"memory worker {route} skipped: {exc}") from None
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if route in KEYED_ROUTES:
            headers[IDEMPOTENCY_HEADER] = uuid.uuid4().hex
        try:
            data = await self.retry.run(
                lambda budget: self._attempt(route, body, headers, budget))
        except _CallFailed as exc:
            if exc.transient and self.breaker.failed():
                log.warning("[memory] worker %s failed %d times in a row (last: %s); not"
                            " calling it for %gs", self.base_url, self.breaker.threshold,
                            exc, self.breaker.cool_down)
            raise
        self.breaker.succeeded()
        return data

    async def _attempt(self, route: str, body: bytes, headers: dict[str, str],
                       budget: float) -> dict[str, Any]:
        """One round trip within ``min(timeout, budget)`` seconds; ``Transient`` wraps a
        failure worth another attempt."""
        import aiohttp

        session = self._session_for_loop()
        timeout = min(self.timeout, budget)
        try:
            with tracing.span(f"POST {route}", {"http.request.method": "POST",
                                                "url.path": route},
                              kind="client") as span:
                sent = dict(headers)
                tracing.inject(sent)  # the W3C trace context, for the worker's span
                async with session.post(self.base_url + route, data=body, headers=sent,
                                        allow_redirects=False,
                                        timeout=aiohttp.ClientTimeout(total=timeout)
                                        ) as response:
                    status = response.status
                    span.set_attribute("http.response.status_code", status)
                    wait = retry_after(response.headers.get("Retry-After"))
                    raw = await _read_capped(response)
        except TimeoutError:
            raise Transient(_CallFailed(f"timed out after {timeout:g}s", transient=True))\
                from None
        except aiohttp.ClientError as exc:
            failure = _CallFailed(f"transport error: {type(exc).__name__}: {exc}",
                                  transient=True)
            if isinstance(exc, aiohttp.ClientConnectorError) and route not in KEYED_ROUTES:
                # Nobody listens: a read (the per-turn block, a listing) degrades at once
                # rather than hold the turn through the backoff; a write, which would be
                # lost, waits for a worker that may be restarting. Either counts toward the
                # breaker.
                raise failure from None
            raise Transient(failure) from None
        data = _json_object(raw)
        if not 200 <= status < 300:
            reason = data.get("error") if isinstance(data, dict) else None
            if not isinstance(reason, str):
                reason = raw[:200].decode("utf-8", "replace").strip() or "no reason given"
            failure = _CallFailed(f"answered {status}: {reason}", status,
                                  transient=status in TRANSIENT_STATUSES)
            if failure.transient:
                raise Transient(failure, wait)
            raise failure
        if data is None:
            raise _CallFailed(f"answered {status} with a body that is not a JSON object")
        return data

    async def _command(self, route: str, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self._call(route, payload)
        except _CallFailed as exc:
            error = (StoreRefused if exc.status in _REFUSED_BODY
                     else ScopeLimitReached if exc.status == 507
                     else StoreUnsupported if exc.status == 501 else StoreError)
            raise error(f"memory worker {route} failed: {exc}") from None

    # --- the store ------------------------------------------------------------------------

    async def retrieve(self, scope_key: str, query: str, limit: int) -> list[Record]:
        return [hit.record for hit in await self.search(scope_key, query, limit)]

    async def retrieve_strict(self, scope_key: str, query: str, limit: int) -> list[Record]:
        """``retrieve``, raising ``StoreError`` where ``retrieve`` degrades to nothing."""
        return [hit.record for hit in await self.search_strict(scope_key, query, limit)]

    async def search(self, scope_key: str, query: str, limit: int, *, bump: bool = True
                     ) -> list[Hit]:
        try:
            return await self.search_strict(scope_key, query, limit, bump=bump)
        except WorkerUnavailable as exc:  # warned once, when the breaker opened
            log.debug("[memory] %s; reading nothing from it", exc)
            return []
        except StoreError as exc:
            log.warning("[memory] %s; reading nothing from it", exc)
            return []

    async def search_strict(self, scope_key: str, query: str, limit: int, *,
                            bump: bool = True) -> list[Hit]:
        """``search``, raising ``StoreError`` where ``search`` degrades to nothing."""
        payload: dict[str, Any] = {"scopeKey": scope_key,
                                   "query": wire_query(query, self.ranking.analyzer),
                                   "limit": limit}
        if not bump:
            payload["bump"] = False
        try:
            data = await self._call("/retrieve", payload)
            records, matches, dropped = _hits(data, scope_key)
        except _CallFailed as exc:
            raise StoreError(f"worker /retrieve for {scope_key} failed ({exc})") from None
        if dropped:
            log.warning("[memory] worker /retrieve for %s: dropped %d malformed record(s)",
                        scope_key, dropped)
        if "bumped" not in data:
            self._legacy = True
        if matches is None:  # a worker from before matches: the seed's plain share
            words = query_terms(query).terms
            return [Hit(record, keyword_match(words, record)) for record in records]
        return [Hit(record, match) for record, match in zip(records, matches, strict=True)]

    async def mark_used(self, used: Mapping[str, Sequence[str]]) -> int:
        """One ``/used`` call for every scope (split only past the wire's caps). Never
        raises: a use count is advisory, and a failure costs one warning. A worker that
        predates the route bumped at retrieval already; nothing is sent to it."""
        items = [{"scopeKey": key, "ids": list(ids)} for key, ids in used.items() if ids]
        if self._legacy or not items:
            return 0
        marked = 0
        for batch in _used_batches(items):
            try:
                data = await self._call("/used", {"used": batch})
            except WorkerUnavailable:
                return marked
            except _CallFailed as exc:
                if exc.status == 404:
                    self._legacy = True
                    return marked
                log.warning("[memory] worker /used failed (%s); use counts not saved", exc)
                return marked
            count = data.get("marked")
            if isinstance(count, int) and not isinstance(count, bool):
                marked += count
        return marked

    async def write(self, scope_key: str, candidates: Sequence[Candidate],
                    cap: int | None = None) -> WriteCounts:
        check_scope_key(scope_key)
        cap = self.cap if cap is None else check_cap(cap)
        if not candidates:
            return WriteCounts()
        batch, dropped = salient_batch(candidates)
        if not batch:
            return dropped
        payload: dict[str, Any] = {"scopeKey": scope_key, "records": to_wire(batch)}
        if cap is not None:
            payload["cap"] = cap
        data = await self._command("/write", payload)
        if cap is not None:
            self._note_applied_cap(cap, data.get("cap"))
        try:
            return from_wire(data, WriteCounts) + dropped
        except WireError as exc:
            raise StoreError(f"memory worker /write answered counts that are not valid: {exc}")\
                from None

    def _note_applied_cap(self, asked: int, applied: object) -> None:
        """One warning per client when the worker ran a write under another cap than the
        one asked (its operator's floor or ceiling; a worker that predates the answer says
        nothing, and nothing is logged)."""
        if (isinstance(applied, bool) or not isinstance(applied, int) or applied == asked
                or self._cap_warned):
            return
        self._cap_warned = True
        log.warning("[memory] worker %s keeps %d records per scope, not the %d asked "
                    "(memory.max_records_per_scope); its operator bounds a client's cap "
                    "(memory.min_records_per_scope and max_records_per_scope on the worker)",
                    self.base_url, applied, asked)

    async def list(self, scope_key: str, limit: int, query: str | None = None,
                   kind: Kind | None = None) -> list[Record]:
        check_scope_key(scope_key)
        payload: dict[str, Any] = {"scopeKey": scope_key, "limit": limit}
        if query is not None:
            payload["query"] = wire_query(query, self.ranking.analyzer)
        if kind is not None:
            payload["kind"] = Kind(kind).value
        data = await self._command("/list", payload)
        try:
            records, dropped = _records(data, scope_key)
        except _CallFailed as exc:
            raise StoreError(f"memory worker /list failed: {exc}") from None
        if dropped:
            log.warning("[memory] worker /list for %s: dropped %d malformed record(s)",
                        scope_key, dropped)
        if kind is not None:
            wanted = [record for record in records if record.kind == kind]
            if len(wanted) < len(records):
                log.warning("[memory] worker /list for %s answered %d record(s) of another "
                            "kind than %s (a worker older than the kind filter?); dropped",
                            scope_key, len(records) - len(wanted), Kind(kind).value)
            records = wanted
        return records

    async def forget(self, scope_key: str, record_id: str) -> bool:
        check_scope_key(scope_key)
        data = await self._command("/forget", {"scopeKey": scope_key, "id": record_id})
        forgotten = data.get("forgotten")
        if not isinstance(forgotten, bool):
            raise StoreError("memory worker /forget answered without a boolean 'forgotten'")
        return forgotten

    async def sweep(self, scope_key: str, dry_run: bool = False) -> SweepResult:
        check_scope_key(scope_key)
        payload: dict[str, Any] = {"scopeKey": scope_key}
        if dry_run:
            payload["dryRun"] = True
        data = await self._command("/sweep", payload)
        try:
            return from_wire(data, SweepResult)
        except WireError as exc:
            raise StoreError(f"memory worker /sweep answered a result that is not valid: {exc}")\
                from None

    async def delete_scope(self, scope_key: str) -> int:
        """Every record of the scope deleted by the worker's store (/delete-scope)."""
        check_scope_key(scope_key)
        return _count(await self._command("/delete-scope", {"scopeKey": scope_key}),
                      "/delete-scope", "deleted")

    async def scrub_provenance(self, scope_key: str, person_key: str) -> int:
        """The person ``person_key`` names scrubbed from the scope's provenance
        (/scrub-provenance)."""
        check_scope_key(scope_key)
        check_scope_key(person_key)
        data = await self._command("/scrub-provenance",
                                   {"scopeKey": scope_key, "personKey": person_key})
        return _count(data, "/scrub-provenance", "scrubbed")

    async def purge(self) -> PurgeResult:
        """The retention purge run by the worker's store on every scope now (/purge)."""
        data = await self._command("/purge", {})
        return PurgeResult(_count(data, "/purge", "purged"), _count(data, "/purge", "scrubbed"))

    async def close(self) -> None:
        session, self._session, self._session_loop = self._session, None, None
        if session is not None and not session.closed:
            await session.close()

    # --- moving records (``stores.porting.PortableStore``) -------------------------------

    async def export_scopes(self) -> builtins.list[str]:
        """Every scope key the worker's store holds, through /scopes a page at a time."""
        keys: list[str] = []
        while True:
            payload: dict[str, Any] = {"limit": MAX_SCOPES_PAGE}
            if keys:
                payload["after"] = keys[-1]
            data = await self._command("/scopes", payload)
            page, more = data.get("scopes"), data.get("more")
            if (not isinstance(page, list) or not isinstance(more, bool)
                    or not all(isinstance(key, str) for key in page)
                    or (keys and page and page[0] <= keys[-1]) or (more and not page)):
                raise StoreError("memory worker /scopes answered without a sorted 'scopes'"
                                 " list and a boolean 'more'")
            keys.extend(page)
            if not more:
                return keys

    async def export_page(self, scope_key: str, after: int, limit: int) -> builtins.list[Record]:
        check_scope_key(scope_key)
        data = await self._command("/export", {"scopeKey": scope_key, "after": after,
                                               "limit": min(limit, MAX_EXPORT_PAGE)})
        items = data.get("records")
        if not isinstance(items, list):
            raise StoreError("memory worker /export answered without a 'records' list")
        records = []
        for n, item in enumerate(items):
            try:
                record = record_from_wire(item)
            except WireError as exc:
                raise StoreError(f"memory worker /export answered a record that is not"
                                 f" valid (records[{n}]: {exc})") from None
            if record.scope_key != scope_key:
                raise StoreError(f"memory worker /export for {scope_key} answered a record"
                                 f" of {record.scope_key}")
            records.append(record)
        return records

    async def import_records(self, records: Sequence[Record]) -> int:
        """The records checked and screened here first (``group_import``: nothing is sent
        when one is refused, and no secret leaves the process), then sent to /import in
        bodies of at most ``MAX_IMPORT_BATCH`` records and about ``MAX_IMPORT_BYTES``; each
        body is one transaction per scope there. The worker imports every record as
        reflection-sourced (``keeps_import_source``)."""
        groups = group_import(records, wall_clock_ms())
        imported = 0
        batch: list[dict[str, Any]] = []
        size = 0
        for _seq, record in (item for group in groups.values() for item in group):
            item = to_wire(record)
            length = len(json.dumps(item, ensure_ascii=False).encode("utf-8"))
            if batch and (len(batch) >= MAX_IMPORT_BATCH or size + length > MAX_IMPORT_BYTES):
                imported += await self._import_batch(batch)
                batch, size = [], 0
            batch.append(item)
            size += length
        if batch:
            imported += await self._import_batch(batch)
        return imported

    async def _import_batch(self, batch: builtins.list[dict[str, Any]]) -> int:
        data = await self._command("/import", {"records": batch})
        count = data.get("imported")
        if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= len(batch):
            raise StoreError("memory worker /import answered without a valid 'imported'")
        return count


def _count(data: Mapping[str, Any], route: str, name: str) -> int:
    """The whole number ``name`` of a worker's answer."""
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StoreError(f"memory worker {route} answered without a whole number {name!r}")
    return value


async def _read_capped(response: aiohttp.ClientResponse) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_any():
        size += len(chunk)
        if size > MAX_REPLY_BYTES:
            raise _CallFailed(f"answered more than {MAX_REPLY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _hits(data: dict[str, Any], scope_key: str
          ) -> tuple[list[Record], list[float] | None, int]:
    """The reply's well-formed records of ``scope_key``, each one's match (None when the
    reply has no usable ``matches``: an older worker), and how many records were dropped."""
    items = data.get("records")
    if not isinstance(items, list):
        raise _CallFailed("answered without a 'records' list")
    raw = data.get("matches")
    usable = (isinstance(raw, list) and len(raw) == len(items)
              and all(isinstance(m, int | float) and not isinstance(m, bool)
                      and 0.0 <= m <= 1.0 for m in raw))
    records: list[Record] = []
    matches: list[float] = []
    dropped = 0
    for n, item in enumerate(items):
        try:
            record = from_wire(item, Record) if isinstance(item, dict) else None
        except WireError:
            record = None
        # A record of another scope can only be a server bug; it must never reach this one.
        if record is None or record.scope_key != scope_key:
            dropped += 1
        else:
            records.append(record)
            if usable:
                matches.append(float(raw[n]))  # type: ignore[index]
    return records, matches if usable else None, dropped


def _used_batches(items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``items`` in requests within ``MAX_USED_SCOPES`` scopes and ``MAX_USED_IDS`` ids."""
    batches: list[list[dict[str, Any]]] = [[]]
    ids = 0
    for item in items:
        for start in range(0, len(item["ids"]), MAX_USED_IDS):
            chunk = item["ids"][start:start + MAX_USED_IDS]
            if len(batches[-1]) >= MAX_USED_SCOPES or ids + len(chunk) > MAX_USED_IDS:
                batches.append([])
                ids = 0
            batches[-1].append({"scopeKey": item["scopeKey"], "ids": chunk})
            ids += len(chunk)
    return batches


def _records(data: dict[str, Any], scope_key: str) -> tuple[list[Record], int]:
    """The reply's well-formed records of ``scope_key`` and how many others were dropped."""
    records, _matches, dropped = _hits(data, scope_key)
    return records, dropped
