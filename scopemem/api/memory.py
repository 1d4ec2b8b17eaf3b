"""The ``Memory`` facade integrators call: build the store, read the block, reflect.

Reads are advisory: a scope that fails to answer costs its records and one warning, never
the run (``context`` says which scopes failed, for a caller that must tell a person). With
memory off no store is built and ``context_block`` returns "", so
``with_memory(system, block)`` hands back the caller's prompt unchanged, byte for byte.

The parts: one scope's read (``api.scope_reads``), a request's repository
(``api.repos``), runs in flight and background work (``api.runs``), browsing
(``api.browsing``) and the manual operations (``api.operations``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from scopemem import tracing
from scopemem.api.browsing import Browsing
from scopemem.api.operations import Operations
from scopemem.api.repos import RepoAnswers
from scopemem.api.runs import Runs
from scopemem.api.scope_reads import ScopeReads
from scopemem.api.semantic import SemanticLane, build_lane, fused_hits
from scopemem.config import MemoryConfig, load_config
from scopemem.core import scoring
from scopemem.core.records import Record
from scopemem.core.requests import (
    Request,
    ScopeKind,
    breadth_of,
    request_scope_keys,
    resolved,
)
from scopemem.core.scopes import order_scope_keys
from scopemem.errors import ScopememError, StoreError
from scopemem.installation import build_store, check_plugin_tables
from scopemem.plugins import host
from scopemem.plugins.manager import PluginManager, get_plugin_manager
from scopemem.plugins.providers import Provider, build_provider, parse_model_ref
from scopemem.stores.base import Clock, Hit, MemoryStore, wall_clock_ms
from scopemem.stores.counting import CountBuffer

if TYPE_CHECKING:
    from scopemem.api.finished_run import ReflectionReport, Run

log = logging.getLogger("scopemem")

@attrs.frozen
class MemoryContext:
    """What the read path found for one request: the ``block`` (``""`` when memory is off or
    nothing matched), the ``scopes`` read (widest first), and the scopes that ``failed``
    (key → reason). A scope that failed cost its records, never the block."""

    block: str
    scopes: tuple[str, ...] = ()
    failed: Mapping[str, str] = attrs.field(factory=dict)


class Memory(Operations):
    """One installation's memory: its config, its store, its scope kinds. The read path and
    reflection are here; the manual operations (remember, list, forget, sweep, search,
    export, stats) come from ``Operations``."""

    def __init__(
        self,
        config: MemoryConfig,
        store: MemoryStore,
        *,
        plugin_manager: PluginManager | None = None,
        clock: Clock = wall_clock_ms,
        environ: Mapping[str, str] | None = None,
        semantic: SemanticLane | None = None,
    ) -> None:
        """``semantic`` is a semantic lane to read and write with instead of the one
        ``memory.embeddings`` names (a host's own embedder, a benchmark's)."""
        self.config = config
        self.store = store
        self.pm = plugin_manager or get_plugin_manager()
        self.clock = clock
        self.scope_kinds: dict[str, ScopeKind] = host.scope_kinds(self.pm, config)
        self.breadth = breadth_of(self.scope_kinds)
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        self._providers: dict[str, Provider] = {}
        self._closed = False  # ``close`` ran: no provider is built again, no model called
        # Runs in flight, reflections pending and use counts saving (``api.runs``).
        self.runs = Runs()
        self.run_slot = self.runs.slot
        self.drain = self.runs.drain
        self.marks_saved = self.runs.marks_saved
        self.pending_reflections = self.runs.pending_reflections
        self.active_runs = self.runs.active_runs
        # A request's repository, awaited once however many ask (``api.repos``).
        self.resolve_repo = RepoAnswers().resolve
        self.ranking = config.ranking_spec()
        # The semantic lane (``memory.embeddings``), or None: the keyword read alone. It is
        # given to the scope reads here, so it is fixed for the instance's life.
        self.semantic: SemanticLane | None = (
            semantic if semantic is not None else build_lane(self.pm, config, self.environ))
        # One scope's read for a block (``api.scope_reads``), each in its trace span.
        self._reads = ScopeReads(store, config, self.semantic)
        # What the read path and reflection count (stores.counting), saved in batches.
        self.counters = CountBuffer(store, clock)
        # Browsing (the Memory Hub's data, ``api.browsing``), exposed as Memory's own calls.
        self.browsing = Browsing(store, config.reach_retention_days)
        self.scope_page = self.browsing.scope_page
        self.record_page = self.browsing.record_page
        self.record_history = self.browsing.record_history
        self.count_totals = self.browsing.count_totals
        self.reaches = self.browsing.reaches

    @classmethod
    def from_config(
        cls,
        source: str | os.PathLike[str] | Mapping[str, Any] | MemoryConfig | None = None,
        *,
        plugin_manager: PluginManager | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Clock = wall_clock_ms,
        allow_fallback: bool = True,
    ) -> Memory:
        """Load the configuration, validate every plugin table (``check_plugin_tables``) and
        build the store. ``allow_fallback`` is for a process that runs for long (a bot, the
        default): the worker client without its token then stands in with the in-process
        store and a warning (000 item 20). A short-lived command passes False and gets a
        ``ConfigError`` naming the variable instead. ``memory.fallback = "refuse"`` makes
        that a ``ConfigError`` for every process, and checks here that the worker answers
        (one blocking ``GET /healthz``; ``StoreError`` naming the key when it does not).
        ``environ``, when given, is the only environment read: ``$SCOPEMEM_CONFIG`` (for
        ``source=None``) and the variables the configuration names."""
        config = load_config(source, environ)
        pm = plugin_manager or get_plugin_manager()
        # Every plugin table, as ``scopemem config check`` validates it: a typo in any of them
        # is a ConfigError naming the key now, not at the first reflection.
        check_plugin_tables(config, pm, environ=environ, clock=clock)
        store = build_store(config, pm, environ=environ, clock=clock,
                            allow_fallback=allow_fallback)
        check = getattr(store, "check_reachable", None)
        if config.enabled and config.fallback == "refuse" and check is not None:
            try:
                check()
            except StoreError as exc:
                raise StoreError(f'memory.fallback = "refuse": {exc}') from None
        return cls(config, store, plugin_manager=pm, clock=clock, environ=environ)

    with_memory = staticmethod(scoring.with_memory)

    async def close(self) -> None:
        """Close the providers and the store. Call ``drain`` first to let reflections end:
        a reflection still pending is cancelled here (one warning each), never left to run
        on a closed store. A reflection scheduled after ``close`` is not started."""
        self._closed = True
        await self.runs.cancel_reflections()
        providers, self._providers = self._providers, {}
        for provider in providers.values():
            try:
                await provider.close()
            except Exception as exc:  # closing must go on to the store whatever happens
                log.warning("[memory] closing a model provider failed: %s", exc)
        if self.semantic is not None:
            try:
                await self.semantic.close()
            except Exception as exc:  # as a provider's: the store must still close
                log.warning("[memory] closing the embedder failed: %s", exc)
        await self.counters.close()
        await self.store.close()

    async def __aenter__(self) -> Memory:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    # --- the write path ---------------------------------------------------------------------

    def schedule_reflection(self, run: Run) -> None:
        """Distill a finished run in the background; returns at once. Call it after the
        reply has been sent, on the running event loop. A failure is one ``[memory]``
        warning and nothing else: it can never delay or alter the user's reply. Memory off:
        nothing happens (no model call, nothing written)."""
        if not self.enabled:
            _release_repo(run.request)
            return
        if self._closed:
            log.warning("[memory] reflection skipped: memory is closed")
            return
        self.runs.reflect(self._reflect_quietly(run))

    async def _reflect_quietly(self, run: Run) -> ReflectionReport | None:
        from scopemem.api.finished_run import run_label
        from scopemem.api.reflecting import reflect  # a read never loads it

        try:
            return await reflect(self, run)
        except asyncio.CancelledError:
            log.warning("[memory] reflection %s cancelled", run_label(run.run_id))
            raise
        except Exception as exc:
            # A plugin's exception may quote what it was sent or a key: the log keeps none.
            from scopemem.secrets import redact

            log.warning("[memory] reflection %s failed: %s: %s", run_label(run.run_id),
                        type(exc).__name__, redact(str(exc)))
            return None

    def reflection_model(self, run_model: str | None) -> tuple[Provider | None, str]:
        """The provider and model reflection calls: ``memory.model``, else the run's own.
        Anything unusable is one warning and no reflection, never a failed run; so is a
        memory already closed (its providers are, and none is built again)."""
        if self._closed:
            log.warning("[memory] reflection skipped: memory is closed")
            return None, ""
        ref_text = self.config.model or run_model
        if not ref_text:
            log.warning("[memory] reflection skipped: no memory.model and no run model")
            return None, ""
        try:
            ref = parse_model_ref(ref_text)
        except ValueError as exc:
            log.warning("[memory] reflection skipped: %s", exc)
            return None, ""
        provider = self._providers.get(ref.provider)
        if provider is None:
            try:
                provider = build_provider(self.pm, self.config, ref, self.environ)
            except ScopememError as exc:
                log.warning("[memory] reflection skipped: %s", exc)
                return None, ""
            self._providers[ref.provider] = provider
        return provider, ref.model

    # --- the read path ----------------------------------------------------------------------

    def scope_keys(self, request: Request) -> list[str]:
        """The scopes this (already resolved) request carries, widest first. A deriver
        that returns an unusable key costs that scope and one warning."""
        keys, refusals = request_scope_keys(self.scope_kinds, request)
        _warn_refusals(refusals)
        return keys

    async def context_block(self, request: Request) -> str:
        """The advisory block for one run, or "" (memory off, or nothing matched).

        Scopes that do not depend on the repo are read at once, in parallel; the repo scope
        once ``request.repo`` settles (it may be an awaitable; none or a failure means no
        repo scope). The repo scope contributes its newest facts outright (the window);
        the others contribute keyword hits on ``request.text``, re-scored as one pool."""
        return (await self.context(request)).block

    async def context(self, request: Request, *, count: bool = True) -> MemoryContext:
        """``context_block``'s answer with what went into it: the scopes read and the ones
        that failed (each also one ``[memory]`` warning).

        A block put in front of a model counts: the keyword hits it shows are marked used (in
        the background; ``marks_saved`` or ``drain`` waits for it), the ``injected``
        counters grow, and every record shown is logged as having reached the request's run
        (``request.run_id`` / ``thread_key``; ``memory.reach_retention_days``).
        ``count=False`` is a preview (``scopemem context``): the same block, and nothing
        counted or logged.

        Traced as a ``context_block`` span with a ``scope_read`` child per scope read
        (``scopemem.tracing``)."""
        if not self.enabled:
            _release_repo(request)
            return MemoryContext("")
        with tracing.span("context_block") as span:
            answer = await self._context(request, count)
            span.set_attributes({"scopes.read": len(answer.scopes),
                                 "scopes.failed": len(answer.failed),
                                 "block.empty": not answer.block})
            return answer

    async def _context(self, request: Request, count: bool) -> MemoryContext:
        early_keys, refusals = request_scope_keys(self.scope_kinds, resolved(request, None))
        # The query's vector, embedded once for every scope (the semantic lane); a long
        # brief is read by keyword alone (``SemanticLane.brief``).
        vector = (None if self.semantic is None
                  else self.semantic.brief(self.store, request.text))
        early = {key: asyncio.ensure_future(self._reads.traced(self._reads.hits, key, request.text,
                                                             vector))
                 for key in early_keys}
        try:
            repo = await self.resolve_repo(request.repo, self.config.repo_wait_seconds)
            late_keys: list[str] = []
            if repo is not None:
                all_keys, more = request_scope_keys(self.scope_kinds, resolved(request, repo))
                late_keys = [key for key in all_keys if key not in early]
                refusals += more
            _warn_refusals(refusals)
            late = {key: asyncio.ensure_future(self._reads.traced(self._reads.late, key,
                                                               request.text, vector))
                    for key in late_keys}
            reads = {**early, **late}
            await asyncio.gather(*reads.values())
        finally:
            for task in early.values():
                task.cancel()
            if vector is not None:
                vector.cancel()
        keys = order_scope_keys(reads, self.breadth)
        window: list[Record] = []
        hits: list[Hit] = []
        failed: dict[str, str] = {}
        cosines: dict[str, float] | None = None
        for key in keys:
            read = reads[key].result()
            window.extend(read.window)
            hits.extend(read.hits)
            if read.error is not None:
                failed[key] = read.error
            if read.cosines is not None:
                cosines = {**(cosines or {}), **read.cosines}
        kept = self._select(window, hits, keys, cosines)
        if count:
            # The window's display never reinforces it (003): only the hits shown are used.
            in_window = {record.id for record in window}
            self._mark_shown([record for record in kept if record.id not in in_window])
            self.counters.count_injected(kept, in_window)
            self._log_reaches(kept, request)
        return MemoryContext(scoring.render_block(kept, keys), tuple(keys), failed)

    def _select(self, window: Sequence[Record], hits: Sequence[Hit], keys: Sequence[str],
                cosines: Mapping[str, float] | None = None) -> list[Record]:
        """The records a block shows, in order, within ``limit`` and ``max_tokens``.

        The repository's window (its newest facts) leads the block whole, as 003 wants; the
        keyword hits take what is left (``scoring.window_then_hits``). The hits of every
        scope (the repository's own beyond its window included) are one pool, re-scored with
        each hit's match in its own scope (in [0, 1], so scopes compare like with like; ties
        to the widest scope, the pool being in breadth order); a hit below ``min_match`` is
        not shown. A window fact that is also a hit is shown once, in the window, and is the
        last of the window to give way when the window alone does not fit.

        With the semantic lane (``cosines``: each hit's cosine), a hit is relevant and
        scored as ``core.fusion`` says."""
        now = self.clock()
        floor = self.config.min_match
        if cosines is not None and self.semantic is not None:
            relevant = fused_hits(hits, cosines, self.semantic.fusion, floor, now)
        else:
            relevant = [hit for hit in hits if hit.match >= floor]
            relevant.sort(key=lambda hit: -scoring.score_of(hit.match,
                                                            hit.record.last_touched, now))
        ranked = list({hit.record.id: hit.record for hit in relevant}.values())
        kept = scoring.window_then_hits(
            window, ranked,
            limit=self.config.limit,
            max_tokens=self.config.max_tokens,
            reserved_tokens=scoring.block_overhead_tokens(keys),
        )
        if (window or ranked) and not kept:
            # Only below the configured floor, or with scope keys longer than it allows for:
            # the prefix naming the scopes leaves no room for even a cut record.
            log.warning("[memory] max_tokens %d leaves no room for a record beside the "
                        "block's prefix (%d scopes); nothing injected",
                        self.config.max_tokens, len(keys))
        return kept

    def _mark_shown(self, records: Sequence[Record]) -> None:
        """Count the keyword hits that reached the prompt as used, and only those: eviction
        keeps the most recently used, so a record retrieved but cut by the budget must not
        look used. Saved in the background; ``drain`` waits for it."""
        mark = getattr(self.store, "mark_used", None)
        if mark is None or not records:
            return
        used: dict[str, list[str]] = {}
        for record in records:
            used.setdefault(record.scope_key, []).append(record.id)

        async def save() -> None:
            try:
                await mark(used)
            except Exception as exc:
                log.warning("[memory] use counts of %d shown record(s) not saved: %s",
                            len(records), exc)

        self.runs.saving(save())

    def _log_reaches(self, records: Sequence[Record], request: Request) -> None:
        """Log which records reached the request's run (every record shown, the window
        included), in the background as use counts are; ``drain`` waits for it."""
        saving = self.browsing.log_shown(records, request, self.clock())
        if saving is not None:
            self.runs.saving(saving)



def _warn_refusals(refusals: Sequence[str]) -> None:
    for refusal in dict.fromkeys(refusals):
        log.warning("[memory] scope skipped: %s", refusal)


def _release_repo(request: Request) -> None:
    """Memory off: close a bare coroutine handed over as ``request.repo`` that nothing will
    await, so it does not warn "was never awaited" each turn (a Task or Future is left to
    whoever made it)."""
    repo = request.repo
    if inspect.iscoroutine(repo) and inspect.getcoroutinestate(repo) == inspect.CORO_CREATED:
        repo.close()
