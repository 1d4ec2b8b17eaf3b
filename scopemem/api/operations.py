"""The manual operations on ``Memory``: remember, list, forget, sweep, search, export, stats.

Each one passes the scope gate (``scopemem.core.commands``: ``read_refusal`` for what reads,
``change_refusal`` for what changes) before it touches a scope, and ``remember`` takes the
write path reflection takes (``host.screen_candidate``: secret redaction, the record
contract's caps, the status gate, then the store's own ``fit_batch``). They return records and
result objects (``scopemem.api.results``); a refusal raises ``MemoryRefused`` with a reason
token, a store failure ``OperationFailed``. The chat grammar and the CLI render these.

A ``scope`` argument is a scope word (``me``, ``all``, ``org``, ``repo``, ``channel``, a
plugin's kind), derived from the ``Caller``'s channel, repository and extra inputs as a run's
scopes are, or a full scope key (``repo:acme/api``), checked against the same gate.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from scopemem import tracing
from scopemem.api.results import (
    Caller,
    ForgetResult,
    ListResult,
    ListSection,
    MemoryRefused,
    OperationFailed,
    RememberResult,
    RepoSource,
    ScopeSweep,
    SearchHit,
    SearchResult,
    SweepReport,
    caller_problem,
)
from scopemem.api.semantic import SemanticLane, embed_written
from scopemem.config import MemoryConfig
from scopemem.core import counters, scoring
from scopemem.core.commands import (
    ALL,
    DEFAULT_LIST_LIMIT,
    MAX_LIST_LIMIT,
    ME,
    USER_KIND,
    all_scopes,
    change_refusal,
    read_refusal,
    shared_scopes,
)
from scopemem.core.hygiene import NOISE, describe_noise, noise_reason
from scopemem.core.policy import AUDIENCE_KINDS, Audience, Visibility, parse_visibility
from scopemem.core.ranking import query_terms
from scopemem.core.records import MAX_TEXT_CHARS, Candidate, Kind, Record, Source
from scopemem.core.requests import Request, ScopeKind, ScopeRefused, derive_scope_key
from scopemem.core.scopes import MemoryIdError, parse_memory_id, scope_key_problem
from scopemem.core.text import sanitize_field
from scopemem.errors import StoreUnsupported
from scopemem.gitremote import typed_repo
from scopemem.plugins import host
from scopemem.plugins.manager import PluginManager
from scopemem.stores.base import Clock, CountingStore, Hit, MemoryStore, check_own, search_hits
from scopemem.stores.base import check_answer as answered
from scopemem.stores.counting import CountBuffer, Stats
from scopemem.stores.porting import export_records, portable

REMEMBER_THREAD_KEY = "cli:remember"


async def _resolve(repo: RepoSource) -> str | None:
    """The caller's repository, or ``None``. A resolver that fails or answers anything but a
    string is ``MemoryRefused`` (``scope_unavailable``) naming what went wrong, so ``all``
    reads the other scopes and a chat reply says why."""
    try:
        value: Any = repo() if callable(repo) else repo
        if inspect.isawaitable(value):
            value = await value
    except Exception as exc:
        raise MemoryRefused("scope_unavailable", "the repository could not be resolved "
                            f"({type(exc).__name__}); name one with --repo owner/name"
                            ) from exc
    if value is not None and not isinstance(value, str):
        raise MemoryRefused("scope_unavailable", f"the repository resolver answered a "
                            f"{type(value).__name__}, not owner/name")
    if not value:
        return None
    ok, named = typed_repo(value)
    if not ok:  # a URL or a bare name: a scope no run in the clone reads
        raise MemoryRefused("scope_unavailable", "the repository is not owner/name as a "
                            "clone's remote names it; name one with --repo owner/name"
                            + (f": {named}" if named else " (e.g. acme/api)"))
    return value


def _in_dm(caller: Caller) -> bool:
    """Whether the caller's channel is a DM (stamped ``dm``): its scope is theirs."""
    return parse_visibility(caller.channel_visibility) is Visibility.DM


class Operations:
    """The manual operations, mixed into ``Memory`` (which sets these attributes)."""

    config: MemoryConfig
    store: MemoryStore
    pm: PluginManager
    scope_kinds: dict[str, ScopeKind]
    clock: Clock
    counters: CountBuffer
    semantic: SemanticLane | None

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    @property
    def store_is_durable(self) -> bool:
        """Whether what the store holds outlives this process: False for the in-process
        store (the fallback of a bot whose worker token is missing) and the null store."""
        return bool(getattr(self.store, "durable", True))

    @property
    def org_key(self) -> str | None:
        """This installation's own org scope key (``org:<organization>``), the one org scope
        its people share; None when no organization is configured."""
        try:
            return derive_scope_key(self.scope_kinds, "org", Request())
        except ScopeRefused:
            return None

    def is_admin(self, caller: Caller) -> bool:
        """Whether the installation names this caller an admin (``memory.admins``)."""
        return caller.user_key in self.config.admins

    # --- the gate -------------------------------------------------------------------------

    def _check_caller(self, caller: Caller) -> None:
        if not self.enabled:
            raise MemoryRefused("memory_off", "memory is off")
        problem = caller_problem(caller.user_key)
        if problem:
            raise MemoryRefused("bad_caller", problem)

    async def _scope_key(self, scope: str, caller: Caller) -> str:
        """The key a scope word names for this caller, or ``MemoryRefused`` saying why
        the caller's request has none."""
        if scope == ME:
            return caller.user_key
        repo = None
        if scope == "repo":
            repo = await _resolve(caller.repo)
            if repo is None:
                raise MemoryRefused("scope_unavailable", "no repository is bound here; name "
                                    "one with --repo owner/name")
        elif scope == "channel" and not caller.channel_id:
            raise MemoryRefused("scope_unavailable", "this request came from no channel")
        request = Request(channel_id=caller.channel_id, repo=repo, extra=dict(caller.extra))
        try:
            return derive_scope_key(self.scope_kinds, scope, request)
        except ScopeRefused as exc:
            raise MemoryRefused("scope_unavailable", str(exc)) from None

    async def scope_keys_for(self, scope: str, caller: Caller,
                             every: Sequence[str] | None = None) -> builtins.list[str]:
        """The keys ``scope`` names for ``caller``: a scope key as given; one scope word's
        key; for ``all`` the key of each word of ``every`` (default: what ``list all``
        reads) that the caller's request has."""
        if not isinstance(scope, str) or not scope:
            raise MemoryRefused("unknown_scope", "a scope is a scope word or a scope key")
        if ":" in scope:
            kind, _, rest = scope.partition(":")
            problem = scope_key_problem(scope) or (
                None if kind and rest.strip() else "a scope key is <kind>:<name>")
            if problem:
                raise MemoryRefused("unknown_scope",
                                    f"{sanitize_field(scope)!r} is not a scope key: {problem}")
            return [scope]
        # ``user`` is a kind but no scope word: a person's own scope is ``me``, and nobody
        # else's can be named.
        if scope != ALL and scope != ME and (scope == USER_KIND
                                             or scope not in self.scope_kinds):
            raise MemoryRefused("unknown_scope",
                                f"no scope kind {sanitize_field(scope)!r} is registered here; "
                                f"known: "
                                f"{', '.join(sorted(self.scope_kinds))}")
        if scope != ALL:
            return [await self._scope_key(scope, caller)]
        keys = []
        for word in all_scopes(self.scope_kinds) if every is None else every:
            try:
                keys.append(await self._scope_key(word, caller))
            except MemoryRefused:
                continue  # ``all`` is every scope the request has
        return keys

    def _origin(self, caller: Caller) -> str | None:
        """The scope key of the channel the caller is in (None: no channel)."""
        if not caller.channel_id:
            return None
        try:
            return derive_scope_key(self.scope_kinds, AUDIENCE_KINDS[Audience.ORIGIN],
                                    Request(channel_id=caller.channel_id))
        except ScopeRefused:
            return None

    def read_refusal(self, key: str, caller: Caller) -> str | None:
        """Why ``caller`` may not read the scope ``key`` (None: allowed): the read gate
        (``core.commands.read_refusal``) with the caller's own channel."""
        return read_refusal(key, caller.user_key, self.org_key, self.scope_kinds,
                            self._origin(caller), _in_dm(caller))

    def _check_read(self, key: str, caller: Caller) -> None:
        reason = self.read_refusal(key, caller)
        if reason:
            raise MemoryRefused("closed_scope", reason)

    def _check_change(self, key: str, caller: Caller, **details: Any) -> None:
        reason = change_refusal(key, caller.user_key, self.is_admin(caller), self.org_key,
                                self.scope_kinds, self._origin(caller), _in_dm(caller))
        if reason is None:
            return
        if self.read_refusal(key, caller):
            raise MemoryRefused("closed_scope", reason, **details)
        raise MemoryRefused("admin_only", reason, **details)

    async def _readable(self, scope: str, caller: Caller, limit: int = 1
                        ) -> builtins.list[str]:
        self._check_caller(caller)
        if (isinstance(limit, bool) or not isinstance(limit, int)
                or not 1 <= limit <= MAX_LIST_LIMIT):
            raise MemoryRefused("bad_limit", f"limit takes a whole number from 1 to "
                                f"{MAX_LIST_LIMIT}, got {limit!r}")
        keys = await self.scope_keys_for(scope, caller)
        for key in keys:
            self._check_read(key, caller)
        return keys

    # --- changing ---------------------------------------------------------------------------

    @tracing.traced("memory.remember")
    async def remember(self, caller: Caller, text: str, scope: str = ME, *,
                       supersedes: str | None = None,
                       thread_key: str = REMEMBER_THREAD_KEY) -> RememberResult:
        """Write one fact a person states, as a ``human`` record no reflection can retire.
        A shared scope needs an admin. With ``supersedes`` it replaces a record of the same
        scope, whoever stated it. ``thread_key`` is the fact's provenance. Noise (the
        salience rule: under three characters, no letter or digit, a telemetry line) is
        refused and counted ``rejected:noise`` at the scope."""
        self._check_caller(caller)
        text = text.strip()
        if not text:
            raise MemoryRefused("empty_text", "there is nothing to remember: the text is empty")
        if scope == ALL:
            raise MemoryRefused("one_scope",
                                "remember writes to one scope: me, or one shared scope")
        [key] = await self.scope_keys_for(scope, caller)
        self._check_change(key, caller)
        if isinstance(supersedes, str):
            supersedes = supersedes.strip()
        if supersedes is not None:
            try:
                target_scope, _seq = parse_memory_id(supersedes)
            except MemoryIdError as exc:
                raise MemoryRefused("bad_id", f"--supersedes {sanitize_field(supersedes)!r} "
                                    f"is not a memory id: {exc}") from None
            if target_scope != key:
                # Both keys may hold what a person typed (--supersedes, --repo).
                raise MemoryRefused("wrong_scope",
                                    f"--supersedes names a record of "
                                    f"{sanitize_field(target_scope)}, not of "
                                    f"{sanitize_field(key)}; a fact can only replace one of "
                                    "its own scope")
        candidate = Candidate(kind=Kind.FACT, text=text, source_thread_key=thread_key,
                              confidence=1.0, source=Source.HUMAN, supersedes=supersedes)
        screened = host.screen_candidate(self.pm, self.config, candidate)
        if screened.cut:
            raise MemoryRefused("too_long",
                                f"that text is {len(text)} characters; a record holds at "
                                f"most {MAX_TEXT_CHARS}: shorten it or split it into "
                                "several facts")
        noise = noise_reason(screened.candidate.text)
        if noise is not None:
            self.counters.add(key, {counters.rejected_by(NOISE): 1})
            raise MemoryRefused("noise", f"not remembered: {describe_noise(noise)}",
                                markers=[NOISE])
        if screened.rejected:
            raise MemoryRefused("gated",
                                f"not remembered: {host.describe_markers(screened.markers)}",
                                markers=builtins.list(screened.markers))
        try:
            counts = answered("write", await self.store.write(key, [screened.candidate]))
        except Exception as exc:
            raise OperationFailed(f"write to {key}", exc) from exc
        await embed_written(self.semantic, self.store, key, bounded=True)
        return RememberResult(key, counts, screened.redacted, supersedes,
                              durable=self.store_is_durable)

    @tracing.traced("memory.forget")
    async def forget(self, caller: Caller, record_id: str) -> ForgetResult:
        """Forget one record: invisible to every read from now on, its text erased. Its
        scope's change rule applies (a shared scope needs an admin). Whitespace around the
        id (a pasted line) is no part of it."""
        self._check_caller(caller)
        if isinstance(record_id, str):
            record_id = record_id.strip()
        try:
            scope_key, _seq = parse_memory_id(record_id)
        except MemoryIdError as exc:
            raise MemoryRefused("bad_id", f"{sanitize_field(record_id)!r} is not a memory id: "
                                f"{exc}") from None
        self._check_change(scope_key, caller, id=record_id)
        try:
            forgotten = answered("forget", await self.store.forget(scope_key, record_id))
        except Exception as exc:
            raise OperationFailed(f"forget of {record_id}", exc) from exc
        return ForgetResult(record_id, forgotten, durable=self.store_is_durable)

    @tracing.traced("memory.sweep")
    async def sweep(self, caller: Caller, scope: str, *, dry_run: bool = False) -> SweepReport:
        """Retire the stored facts of shared scopes that the status gate refuses today
        (``all``: every shared scope the caller's request has). Admins only. Refused with
        the gate off (``memory.gate = false``): a sweep retires by the built-in gate, and
        would retire the facts the writes keep (their text is scrubbed past the
        retention)."""
        self._check_caller(caller)
        keys = await self.scope_keys_for(scope, caller, shared_scopes(self.scope_kinds))
        for key in keys:
            self._check_change(key, caller)
        if not self.config.gate:
            raise MemoryRefused("gate_off", "the status gate is off (memory.gate = false):"
                                " a sweep would retire the facts the writes keep")
        swept = []
        for key in keys:
            try:
                result = answered("sweep", await self.store.sweep(key, dry_run=dry_run))
            except Exception as exc:
                raise OperationFailed(f"sweep of {key}", exc) from exc
            swept.append(ScopeSweep(key, result))
        return SweepReport(dry_run, tuple(swept))

    # --- reading ----------------------------------------------------------------------------

    @tracing.traced("memory.search")
    async def search(self, caller: Caller, query: str, scope: str = ALL, *,
                     limit: int = DEFAULT_LIST_LIMIT) -> SearchResult:
        """The records that match ``query``, best first across the scopes, at most
        ``limit``. A search is a person looking, not a run using: it counts no record as
        used (no use count, no last-used time changes). A scope whose store fails costs its
        hits and is named in ``failed``."""
        keys = await self._readable(scope, caller, limit)
        now = self.clock()
        hits: builtins.list[SearchHit] = []
        failed: dict[str, str] = {}
        for key in keys:
            try:
                found = await self._search_scope(key, query, limit)
            except Exception as exc:
                failed[key] = f"search of {key} failed: {exc}"
                continue
            hits.extend(SearchHit(hit.record, hit.match,
                                  scoring.score_of(hit.match, hit.record.last_touched, now))
                        for hit in found)
        hits.sort(key=lambda hit: -hit.score)
        return SearchResult(tuple(hits[:limit]), tuple(keys), failed)

    async def _search_scope(self, key: str, query: str, limit: int) -> builtins.list[Hit]:
        if getattr(self.store, "search", None) is not None:
            return await search_hits(self.store, key, query, limit, bump=False, strict=True)
        # A store without ``search`` counts whatever ``retrieve`` returns as used: its
        # listing never does, so it serves (newest first, then ranked here).
        records = await self._list(key, limit, query)
        words = query_terms(query).terms
        return [Hit(record, scoring.keyword_match(words, record)) for record in records]

    async def _list(self, key: str, limit: int, query: str | None) -> builtins.list[Record]:
        records = await self.store.list(key, limit, query=query)
        check_own(key, records)
        return records

    @tracing.traced_stream("memory.export")
    async def export(self, caller: Caller, scope: str = ALL
                     ) -> AsyncGenerator[Record, None]:
        """Every record of the scopes ``scope`` names (``all``: each one the caller may
        read and the request has), every status, in seq order within a scope, a page at a
        time. An async generator: a refusal raises at the first iteration."""
        keys = await self._readable(scope, caller)
        store = portable(self.store, self.config.store)
        for key in keys:
            records = export_records(store, key)
            try:
                while True:
                    try:
                        record = await anext(records)
                    except StopAsyncIteration:
                        break
                    except Exception as exc:
                        raise OperationFailed(f"export of {key}", exc) from exc
                    yield record
            finally:
                await records.aclose()

    @tracing.traced("memory.stats")
    async def stats(self, caller: Caller, scope: str = ALL, *, since_day: int = 0) -> Stats:
        """The counters the store keeps (``stores.counting``) for the scopes ``scope`` names,
        on ``since_day`` (``core.counters.day_of``) and later; ``StoreUnsupported`` when the
        store keeps none."""
        keys = await self._readable(scope, caller)
        if not isinstance(self.store, CountingStore):
            raise StoreUnsupported(f"this store (memory.store = {self.config.store!r}) keeps "
                                   "no counters")
        try:
            rows = await self.store.read_counts(keys, since_day=since_day)
        except StoreUnsupported:
            raise
        except Exception as exc:
            raise OperationFailed("reading the counters", exc) from exc
        return Stats(True, since_day, tuple(rows))

    # Last, so that ``list`` in the annotations above is still the builtin.
    @tracing.traced("memory.list")
    async def list(self, caller: Caller, scope: str = ALL, *, query: str | None = None,
                   limit: int = DEFAULT_LIST_LIMIT) -> ListResult:
        """Active records, newest first, at most ``limit`` per scope; with ``query``, only
        those holding its words. Never counts as a use. A scope whose store fails has an
        ``error`` in its section; the result is ``ok`` unless every scope failed."""
        keys = await self._readable(scope, caller, limit)
        sections = []
        for key in keys:
            try:
                records = await self._list(key, limit, query)
            except Exception as exc:
                sections.append(ListSection(key, error=f"list of {key} failed: {exc}"))
                continue
            sections.append(ListSection(key, tuple(records)))
        return ListResult(tuple(sections), limit, query)
