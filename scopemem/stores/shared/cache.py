"""A process's copies of large scopes' postings, checked with every retrieval (both SQL stores;
``docs/storage.md``, "A retrieval" and "The change counter").

A brief matches most of a large scope, so reading its terms' postings costs most of a
retrieval (a 10,000-record scope: about 18,000 postings a brief). A copy answers only once
the first read of the candidates' rows has found the scope's change counter the one the copy
was read at, before any use is counted: no state another process's write could contradict,
only a stale copy, which is not read. A use count is never in the copy. What a copy costs:
``docs/storage-figures.md``, "What a copy costs".
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from scopemem.stores.shared.tokens import read_postings

if TYPE_CHECKING:
    from scopemem.stores.dense import DenseIndex

__all__ = ["DEFAULT_MIN_POSTINGS", "DEFAULT_POSTINGS_CACHE", "PostingsCache", "ScopeCopy",
           "dense_index"]

log = logging.getLogger("scopemem.stores")

#: Postings held in memory across all scopes (62-72 bytes each): a 10,000-record scope
#: holds about 200,000.
DEFAULT_POSTINGS_CACHE = 1_000_000
#: A retrieval that reads this many postings has its scope copied: a brief over a scope of a
#: few dozen records already reads more from a copy than from the server's postings costs.
DEFAULT_MIN_POSTINGS = 256
#: Retrievals of a scope at one change counter before it is copied: a scope written between
#: most of its reads is answered by the server rather than copied again after every write
#: (a copy of 10,000 records takes about a quarter of a second to read).
READS_BEFORE_COPY = 2
#: Seconds between two copies of one scope: a large scope written every few seconds and read
#: in between is copied at most this often (each copy allocates a scope's index anew, and
#: Python's collector may then pause the process for tens of milliseconds).
COPY_INTERVAL = 5.0
#: A copy of fewer postings is weighed in Python (``core.topk``, through ``tokens.Candidates``)
#: rather than as arrays: over a few hundred postings numpy's cost per call is more than the
#: work (a 20-record scope answered from memory: 1,630 retrievals a second against 1,340
#: with arrays, beside writes).
DENSE_MIN_POSTINGS = 4_096
#: Scopes whose reads since their last change are counted (the least recent are forgotten).
_SEEN = 4_096


class Touches(dict[int, tuple[int, None]]):
    """seq → (last touch, None), where a seq not held reads as touched at 0: the oldest
    possible, so the lowest score a row can have (the score rule stays a lower bound)."""

    def __missing__(self, seq: int) -> tuple[int, None]:
        return (0, None)


@attrs.frozen
class ScopeCopy:
    """A scope's index at change counter ``generation``: term → the seqs of the active
    records holding it, the seqs that continue their predecessor's thread, and the active
    count. Never changed once made (readers share it)."""

    generation: int
    active: int
    # A term not held is absent, never an empty set.
    postings: Mapping[str, Collection[int]]
    continues: frozenset[int]
    size: int
    # seq → (its last touch when copied, None): lower bounds of the rows' last touches, as
    # ``core.topk``'s score rule reads ``details``; a seq not held reads as never touched.
    touches: Touches = attrs.field(factory=lambda: Touches({}))
    # The postings as arrays (stores.dense): a retrieval weighs every record at once.
    dense: DenseIndex | None = None

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[object]],
                  touches: Iterable[Sequence[int]] = ()) -> ScopeCopy | None:
        """From ``Statements.scope_postings``'s rows (active, generation, term, plain,
        continuing) and ``Statements.scope_touches``'s (seq, last touch), read in one
        snapshot; None for a scope that does not exist."""
        if not rows or rows[0][0] is None:
            return None
        active, generation = int(rows[0][0]), int(rows[0][1])  # type: ignore[call-overload]
        postings, continues = read_postings(
            (row[2], row[3], row[4]) for row in rows if row[2] is not None)  # type: ignore[misc]
        frozen = {term: frozenset(seqs) for term, seqs in postings.items()}
        chained = frozenset(continues)
        return cls(generation, active, frozen, chained, sum(map(len, frozen.values())),
                   Touches({seq: (touched, None) for seq, touched in touches}),
                   dense_index(frozen, chained))

    def terms(self, terms: Iterable[str]) -> dict[str, Collection[int]]:
        """The postings of ``terms`` (those some record holds)."""
        postings = self.postings
        return {term: postings[term] for term in terms if term in postings}


def dense_index(postings: Mapping[str, Collection[int]], continues: frozenset[int],
                size: int | None = None, seqs: Collection[int] | None = None
                ) -> DenseIndex | None:
    """The arrays of a copy's postings, for a copy large enough to be weighed that way;
    ``size`` (the postings held) and ``seqs`` (the active seqs) when the caller knows them."""
    if size is None:
        size = sum(map(len, postings.values()))
    if size < DENSE_MIN_POSTINGS:
        return None
    from scopemem.stores.dense import DenseIndex  # numpy: only for a copy this large

    if seqs is None:
        seqs = set().union(*postings.values())
    return DenseIndex(postings, seqs, continues)


Loader = Callable[[str], Awaitable[ScopeCopy | None]]


class PostingsCache:
    """The copies, least recently read first, within ``budget`` postings."""

    def __init__(self, budget: int = DEFAULT_POSTINGS_CACHE,
                 min_postings: int = DEFAULT_MIN_POSTINGS) -> None:
        self.budget = budget
        self.min_postings = min_postings
        self._copies: OrderedDict[str, ScopeCopy] = OrderedDict()
        self._held = 0
        self._loading: dict[str, asyncio.Task[None]] = {}
        # scope → (the change counter its last reads saw, how many read it)
        self._seen: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._copied_at: dict[str, float] = {}  # when each scope's last copy was begun
        self.interval = COPY_INTERVAL
        self.answered = 0  # retrievals answered from a copy (for tests and benchmarks)

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    async def settled(self) -> None:
        """Wait for the copies being read now (tests and benchmarks)."""
        while self._loading:
            await asyncio.gather(*self._loading.values(), return_exceptions=True)

    def latest(self, scope_key: str) -> ScopeCopy | None:
        """The copy held, of whatever change counter (the caller checks it)."""
        copy = self._copies.get(scope_key)
        if copy is not None:
            self._copies.move_to_end(scope_key)
        return copy

    def discard(self, scope_key: str, generation: int) -> None:
        """Drop the copy read at ``generation`` (found out of date), if it is the one held."""
        copy = self._copies.get(scope_key)
        if copy is not None and copy.generation == generation:
            self._drop(scope_key)

    def offer(self, scope_key: str, generation: int, postings_read: int, load: Loader
              ) -> None:
        """After a retrieval that read ``postings_read`` postings from the server at change
        counter ``generation``: copy the scope in the background when that is enough to pay
        for a copy and the scope was read ``READS_BEFORE_COPY`` times since it last
        changed."""
        if not self.enabled or scope_key in self._loading or postings_read < self.min_postings:
            return
        seen, reads = self._seen.pop(scope_key, (generation, 0))
        reads = reads + 1 if seen == generation else 1
        self._seen[scope_key] = (generation, reads)
        while len(self._seen) > _SEEN:
            self._seen.popitem(last=False)
        if reads < READS_BEFORE_COPY:
            return
        began = time.monotonic()
        if began - self._copied_at.get(scope_key, -self.interval) < self.interval:
            return
        self._copied_at[scope_key] = began
        if len(self._copied_at) > _SEEN:  # forget the oldest beginnings
            for old in sorted(self._copied_at, key=self._copied_at.__getitem__)[:_SEEN // 2]:
                del self._copied_at[old]
        self._loading[scope_key] = asyncio.get_running_loop().create_task(
            self._load(scope_key, load), name=f"scopemem-copy:{scope_key}")

    async def _load(self, scope_key: str, load: Loader) -> None:
        try:
            copy = await load(scope_key)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a copy is an optimization: the server still answers
            log.warning("store: copying the index of %s failed: %s", scope_key, exc)
            return
        finally:
            self._loading.pop(scope_key, None)
        if copy is not None:
            self.put(scope_key, copy)

    def put(self, scope_key: str, copy: ScopeCopy) -> bool:
        """Hold ``copy`` (unless one at least as new is held), dropping the least recently
        read to fit; whether it is held."""
        if copy.size > self.budget:
            return False
        held = self._copies.get(scope_key)
        if held is not None and held.generation >= copy.generation:
            return False  # a copy at least as new arrived meanwhile
        self._drop(scope_key)
        while self._copies and self._held + copy.size > self.budget:
            self._drop(next(iter(self._copies)))
        self._copies[scope_key] = copy
        self._held += copy.size
        return True

    def _drop(self, scope_key: str) -> None:
        copy = self._copies.pop(scope_key, None)
        if copy is not None:
            self._held -= copy.size

    async def close(self) -> None:
        """Stop the copies being read (the store is closing)."""
        tasks = list(self._loading.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._copies.clear()
        self._held = 0
