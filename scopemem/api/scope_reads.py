"""One scope's part of a memory block, read from the store (``Memory.context``): its
keyword hits, with the semantic lane its dense candidates and cosines, and for the
repository scope its newest facts (the window) besides. A scope that fails costs its
records and one warning, never the block: the failure is the read's ``error``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

import attrs

from scopemem import tracing
from scopemem.api.semantic import SemanticLane
from scopemem.config import MemoryConfig
from scopemem.core.records import Kind, Record
from scopemem.core.scopes import scope_kind
from scopemem.stores.base import Hit, MemoryStore, check_own, search_hits

__all__ = ["REPO_KIND", "ScopeRead", "ScopeReads", "Vector"]

log = logging.getLogger("scopemem")

REPO_KIND = "repo"

# The query's vector as the scope reads await it (None: the semantic lane is off).
Vector = asyncio.Future[bytes] | None


@attrs.frozen
class ScopeRead:
    """One scope's part of a block: the repository's window (newest facts, shown outright)
    and keyword hits, each with its match; with the semantic lane, its dense candidates
    among the hits (match 0 when they are not keyword hits) and every hit's cosine."""

    window: list[Record]
    hits: list[Hit]
    error: str | None = None
    cosines: Mapping[str, float] | None = None


class ScopeReads:
    """Reads of one scope from ``store``, within ``config``'s limits."""

    def __init__(self, store: MemoryStore, config: MemoryConfig,
                 semantic: SemanticLane | None) -> None:
        self.store = store
        self.config = config
        self.semantic = semantic

    async def traced(self, read: Callable[[str, str, Vector], Awaitable[ScopeRead]],
                           key: str, query: str, vector: Vector) -> ScopeRead:
        """``read`` of the scope ``key`` in a ``scope_read`` span: its kind, counts,
        outcome."""
        with tracing.span("scope_read", tracing.scope_attributes(
                key, self.config.tracing.scope_keys)) as span:
            answer = await read(key, query, vector)
            span.set_attributes({"records.window": len(answer.window),
                                 "records.hits": len(answer.hits),
                                 "outcome": "ok" if answer.error is None else "failed"})
            return answer

    async def hits(self, key: str, query: str, vector: Vector = None) -> ScopeRead:
        try:
            hits = await search_hits(self.store, key, query, self.config.limit, bump=False,
                                     strict=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("[memory] retrieve from %s failed: %s", key, exc)
            return ScopeRead([], [], str(exc) or type(exc).__name__)
        if vector is None or self.semantic is None:
            return ScopeRead([], hits)
        hits, cosines = await self.semantic.read(self.store, key, hits, vector,
                                                 self.config.limit)
        return ScopeRead([], hits, cosines=cosines)

    async def _window(self, key: str) -> list[Record]:
        records = await self.store.list(key, self.config.repo_window, kind=Kind.FACT)
        check_own(key, records)
        return records

    async def late(self, key: str, query: str, vector: Vector = None) -> ScopeRead:
        """The repository scope: its window and its keyword hits beyond it (so an older
        lesson that fits the brief still gets a slot); any other scope: its hits."""
        if scope_kind(key) != REPO_KIND or self.config.repo_window <= 0:
            return await self.hits(key, query, vector)
        window_read = asyncio.ensure_future(self._window(key))
        try:
            read = await self.hits(key, query, vector)
        except BaseException:
            window_read.cancel()  # cancelled with the read: leave nothing running behind
            raise
        try:
            records = await window_read
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("[memory] repository window for %s failed: %s", key, exc)
            return ScopeRead([], read.hits, str(exc) or type(exc).__name__, read.cosines)
        # The window is facts only, whatever a store answered.
        return ScopeRead([record for record in records if record.kind == Kind.FACT],
                          read.hits, read.error, read.cosines)
