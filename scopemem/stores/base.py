"""The store seam: what every store does, and the settings a store factory receives.

The memory algorithm is not per store: every store hands its rows to ``scopemem.core.engine``
and persists what the engine decides, so two stores given the same calls give the same
answers (the contract suite in ``tests/stores`` checks exactly that).
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import ClassVar, NamedTuple, NoReturn, Protocol, TypeVar, runtime_checkable

import attrs

from scopemem.core import browse
from scopemem.core.counters import DAY_MS
from scopemem.core.hygiene import fit_candidate, noise_reason, without_nul
from scopemem.core.ranking import Ranking, query_terms
from scopemem.core.records import (
    DEFAULT_RETENTION_DAYS,
    DEFAULT_SCOPE_CAP,
    MAX_RETENTION_DAYS,
    MAX_SCOPE_CAP,
    MAX_SOURCE_CHARS,
    Candidate,
    CountRow,
    Kind,
    Record,
    SweepResult,
    WriteCounts,
)
from scopemem.core.scopes import ScopeKeyError, validate_scope_key
from scopemem.core.scoring import keyword_match
from scopemem.core.text import is_text, sanitize_field
from scopemem.errors import StoreError
from scopemem.languages import DEFAULT_LANGUAGES, analyzer_for
from scopemem.options import OptionsTable

__all__ = [
    "DEFAULT_RANKING", "Clock", "BrowsingStore", "CountingStore", "Hit", "MemoryStore",
    "RankedStore", "StoreError", "StoreFactory", "StoreSettings", "check_answer", "check_cap",
    "check_days", "check_retention_days", "check_scope_key", "fit_batch",
    "redact_provenance", "redact_source", "retention_cutoff", "salient_batch", "search_hits",
    "wall_clock_ms", "write_batch",
]

Clock = Callable[[], int]
Cap = TypeVar("Cap", bound=int | None)
Answer = TypeVar("Answer")

#: What a store ranks with when nothing is configured: weighted, English.
DEFAULT_RANKING = Ranking(analyzer_for(DEFAULT_LANGUAGES))


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@runtime_checkable
class MemoryStore(Protocol):
    """What memory needs from storage. Every method is scoped to one scope key; no call can
    read or change another scope's records."""

    async def retrieve(self, scope_key: str, query: str, limit: int) -> list[Record]:
        """The ``limit`` best active records matching ``query``, best first; bumps the
        usage (use count, last use) of exactly the records returned."""

    async def write(
        self, scope_key: str, candidates: Sequence[Candidate], cap: int | None = None
    ) -> WriteCounts:
        """Apply the engine's plan to each candidate in order, as one all-or-nothing batch,
        then evict least recently used records above ``cap`` (the store's default if None).
        Each candidate is first redacted and fitted to the record contract
        (``fit_batch``), so a candidate lands the same way on every store and no store
        keeps a secret."""

    async def list(
        self, scope_key: str, limit: int, query: str | None = None, kind: Kind | None = None
    ) -> list[Record]:
        """Active records newest first, optionally filtered by kind and by whole-token query
        hits, limit applied last. Never bumps usage: a view, not a retrieval."""

    async def forget(self, scope_key: str, record_id: str) -> bool:
        """Soft-delete one active record of this scope; False when there was none."""

    async def sweep(self, scope_key: str, dry_run: bool = False) -> SweepResult:
        """Retire every active fact the gate rejects (status ``swept``); with ``dry_run``
        change nothing and return the ids that would go."""

    async def close(self) -> None:
        """Release connections and sessions. Idempotent."""


@runtime_checkable
class RankedStore(MemoryStore, Protocol):
    """A store that also answers with matches and can leave counting uses to its caller:
    what ``Memory`` uses to count as used only the records a prompt showed. Every built-in
    store is one; a store with only ``MemoryStore``'s methods still works (``search_hits``
    serves it through ``retrieve``, which counts everything it returns)."""

    async def search(self, scope_key: str, query: str, limit: int, *, bump: bool = True
                     ) -> list[Hit]:
        """``retrieve``'s records with their keyword match. With ``bump=False`` nothing is
        counted as used: the caller marks what it showed (``mark_used``)."""

    async def mark_used(self, used: Mapping[str, Sequence[str]]) -> int:
        """Count the named records (scope key → ids) as used now, as a retrieval that
        returned them would; ids that are not active records of their scope are skipped.
        Answers how many were marked."""


@runtime_checkable
class CountingStore(Protocol):
    """A store that keeps per-scope counters by UTC day (``core.counters``). Optional: a
    store without these methods still works, and ``scopemem stats`` then says that it keeps
    no counters.

    What a store changes it counts itself, inside the transaction making the change (write
    outcomes, sweeps, forgets), so after a crash the counters and the rows never disagree.
    What only the host sees (reflection's offers and rejections, the records a prompt
    showed) comes through ``add_counts``."""

    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        """Add each row's value to its scope's counter on its day. Rows of many scopes and
        days may come in one call (the host batches them); a name ``core.counters`` does not
        know is refused with ``StoreError`` before anything is added."""

    async def read_counts(self, scope_keys: Sequence[str] | None = None, *,
                          prefix: str | None = None, since_day: int = 0) -> list[CountRow]:
        """The counters on ``since_day`` and later of the named scopes (every scope when
        ``scope_keys`` is None) whose key starts with ``prefix`` (when given); sorted by
        scope, day and name, one row each. A scope that has counted nothing has no rows."""


@runtime_checkable
class BrowsingStore(Protocol):
    """A store a person can browse (the Memory Hub): ``core.browse``'s pages and reaches.
    Every built-in store is one (null answers nothing); ``stores.browsing`` has the rules."""

    async def scope_page(self, *, kind: str | None = None, sort: str = "key",
                         descending: bool = False, offset: int = 0, limit: int = 50
                         ) -> browse.ScopePage: ...

    async def record_page(self, scope_key: str, *, kind: Kind | None = None,
                          status: str | None = None, source: str | None = None,
                          offset: int = 0, limit: int = 50) -> browse.RecordPage: ...

    async def record_history(self, scope_key: str, record_id: str
                             ) -> browse.RecordHistory | None: ...

    async def read_count_totals(self, kind: str, *, since_day: int = 0
                                ) -> list[browse.CountTotal]:
        """The counters of every scope of ``kind`` on ``since_day`` and later, summed by day
        and name, sorted so: from totals the store keeps with its counters (a row per kind,
        day and name), never from every scope's counters."""

    async def log_reaches(self, reaches: Sequence[browse.Reach]) -> None: ...

    async def read_reaches(self, *, record_id: str | None = None, run: str | None = None,
                           limit: int = 100) -> list[browse.Reach]: ...


class Hit(NamedTuple):
    """A retrieved record with its keyword match in its scope, in [0, 1]
    (``core.ranking``): what lets records of different scopes be ranked as one pool. A
    named tuple, not an attrs class: every retrieval builds a few, on the hot path."""

    record: Record
    match: float


@attrs.frozen(kw_only=True)
class StoreSettings(OptionsTable):
    """What a store factory is built from: its own options table (``[memory.stores.<name>]``,
    validated by the store with the ``OptionsTable`` helpers), the per-scope cap, the
    environment (for secrets named by config), and a clock returning epoch milliseconds."""

    TABLE: ClassVar[str] = "stores"

    cap: int = DEFAULT_SCOPE_CAP
    # How long a dead row (superseded, evicted, swept) keeps its text before it is purged
    # (``memory.retention_days``); 0 purges it with the write that retires it. A forgotten
    # row's text is scrubbed at once whatever this says.
    retention_days: int = DEFAULT_RETENTION_DAYS
    # How long a reach (a record shown to a run, ``core.browse``) is kept
    # (``memory.reach_retention_days``); 0 keeps none.
    reach_retention_days: int = browse.DEFAULT_REACH_RETENTION_DAYS
    clock: Clock = wall_clock_ms
    # How the store ranks (``memory.languages`` and ``memory.ranking``).
    ranking: Ranking = DEFAULT_RANKING
    # Whether a store whose durable backend is not configured (the worker client without its
    # token) may stand in with the in-process store and a warning (000 item 20). A bot that
    # runs for days may; a one-shot command must not: that store dies with the command and
    # takes everything the command wrote with it.
    allow_fallback: bool = True
    # What stands in then: the in-process store, built by the host
    # (``installation.in_process_store``), so no store imports another; None: nothing may.
    stand_in: Callable[[StoreSettings], MemoryStore] | None = None
    # The factory is called only to validate its table and record its options (config
    # check, startup): it must not warn about the running environment, and what it returns
    # is dropped unused. Factories do no I/O, so building one costs nothing.
    validate_only: bool = False


StoreFactory = Callable[[StoreSettings], MemoryStore]



def check_scope_key(scope_key: object) -> str:
    """``scope_key`` when a store may use it; else ``StoreError`` (never a ``TypeError`` or a
    ``UnicodeEncodeError`` from deeper down)."""
    try:
        key = validate_scope_key(scope_key)
    except ScopeKeyError as exc:
        raise StoreError(str(exc)) from None
    if not is_text(key):
        raise StoreError("scope key is not valid Unicode text (it holds a lone surrogate)")
    return key


def check_cap(cap: object) -> int:
    return check_days(cap, "cap", MAX_SCOPE_CAP, least=1)


def check_days(days: object, name: str, most: int, *, least: int = 0) -> int:
    """``days`` when it is a whole number from ``least`` to ``most``; else ``StoreError``
    naming the option ``name``."""
    if isinstance(days, bool) or not isinstance(days, int) or not least <= days <= most:
        raise StoreError(f"{name} must be an integer from {least} to {most}, got {days!r}")
    return days


def check_retention_days(days: object) -> int:
    return check_days(days, "retention_days", MAX_RETENTION_DAYS)


def retention_cutoff(now: int, retention_days: int) -> int:
    """The latest time a row (a dead record, a reach) may date from and be purged ``now``,
    when rows are kept ``retention_days``."""
    return now - retention_days * DAY_MS


def redact_source(value: str) -> str:
    """A thread key or run id with its secrets replaced, as a record or a log line may
    carry it: cut first to twice ``MAX_SOURCE_CHARS`` (what follows could never be kept,
    and the cut bounds the work, with room for a secret that starts before the cap to be
    seen whole), redacted, then cut to the cap."""
    return _redacted_source(value[:2 * MAX_SOURCE_CHARS])[:MAX_SOURCE_CHARS]


# A batch's candidates share their thread and run, and a thread writes again and again: the
# redaction of a key (which the token rules must look at closely) is done once.
@functools.lru_cache(maxsize=256)
def _redacted_source(value: str) -> str:
    # The rules load on the first redaction, not when a command that writes nothing starts.
    from scopemem.secrets import redact

    return redact(value)


def redact_provenance(candidate: Candidate) -> Candidate:
    """The candidate with secrets in its thread key and run id replaced, as in its text
    (``redact_source``: cut to ``MAX_SOURCE_CHARS`` too)."""
    thread_key = redact_source(candidate.source_thread_key)
    run_id = None if candidate.source_run_id is None else redact_source(candidate.source_run_id)
    if thread_key == candidate.source_thread_key and run_id == candidate.source_run_id:
        return candidate
    return attrs.evolve(candidate, source_thread_key=thread_key, source_run_id=run_id)


def fit_batch(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The candidates as every store writes them, one for one: rid of NUL characters (so
    redaction sees the text as stored), redacted (secrets in the text and provenance
    replaced, keywords holding one dropped), then fitted to the record contract, so no store
    keeps a secret or what another would refuse, and the worker client never sends either
    (the worker server's own store redacts what any other client sends)."""
    from scopemem.secrets import redact_candidate

    return [fit_candidate(redact_provenance(redact_candidate(without_nul(candidate))))
            for candidate in candidates]


def salient_batch(candidates: Sequence[Candidate]) -> tuple[list[Candidate], WriteCounts]:
    """What a store's ``write`` plans: ``fit_batch``'s candidates but those the salience
    rule drops as noise (``scopemem.core.hygiene.noise_reason``), and the counts to start
    the write's answer from (``dropped``: how many were dropped)."""
    kept = [candidate for candidate in fit_batch(candidates)
            if noise_reason(candidate.text) is None]
    return kept, WriteCounts(dropped=len(candidates) - len(kept))


def write_batch(scope_key: str, candidates: Sequence[Candidate], cap: int | None,
                default: Cap) -> tuple[list[Candidate], WriteCounts, int | Cap]:
    """What every store's ``write`` starts with: the scope key and the cap checked (the
    store's ``default`` when None), then ``salient_batch``'s candidates and counts."""
    check_scope_key(scope_key)
    checked = default if cap is None else check_cap(cap)
    return (*salient_batch(candidates), checked) if candidates else ([], WriteCounts(), checked)





def descriptors_held(store: object) -> int:
    """The most file descriptors ``store`` holds open at once: its database files, WALs and
    shared memory, its connections to a database server. A store says so with a
    ``max_descriptors()`` method (optional, as ``CountingStore``'s are); one without it holds
    none of its own. The worker keeps this many of the process's open-file limit for the
    store and sizes its connections to the rest."""
    method = getattr(store, "max_descriptors", None)
    if method is None:
        return 0
    held = method()
    if isinstance(held, bool) or not isinstance(held, int) or held < 0:
        raise StoreError(f"{type(store).__name__}.max_descriptors() answered {held!r},"
                         " not a whole number")
    return held


def check_own(scope_key: str, records: Iterable[Record]) -> None:
    """``StoreError`` when one of ``records``, read from the scope ``scope_key``, is another
    scope's: a store plugin's bug (the built-in stores never answer one; the worker client
    refuses one from the wire), so the read costs that scope and nothing crosses to a
    reader of this one. Every read that puts records in front of a person or a model
    checks what the store answered with it."""
    for record in records:
        if record.scope_key != scope_key:
            raise StoreError(f"the store answered a record of another scope for {scope_key}"
                             f" ({sanitize_field(record.scope_key)!r}); none is shown")


#: What a store's changing methods answer (``MemoryStore``), checked by ``check_answer``.
ANSWERS: Mapping[str, type] = {"write": WriteCounts, "forget": bool, "sweep": SweepResult}


def check_answer(method: str, answer: Answer) -> Answer:
    """``answer`` when it is what the store's ``method`` answers (``ANSWERS``); else
    ``StoreError`` naming both. A store plugin's wrong answer (``None`` for counts, a dict
    for a bool) costs its operation, as a raise does: never a traceback where it is
    rendered, nor a truthy dict read as "forgotten"."""
    expected = ANSWERS[method]
    if not isinstance(answer, expected):
        shown = repr(answer)
        shown = f"{shown[:80]}…" if len(shown) > 80 else shown
        raise StoreError(f"the store answered {method} with {sanitize_field(shown)}, not a "
                         f"{expected.__name__}")
    return answer


async def search_hits(store: MemoryStore, scope_key: str, query: str, limit: int, *,
                      bump: bool, strict: bool = False) -> list[Hit]:
    """``store.search`` (its raising form, ``search_strict``, when ``strict`` and the store
    has one: a store whose ``search`` degrades to nothing by contract, as the worker client's
    does, so a caller can tell "nothing matched" from "the scope failed"). A third-party
    store without ``search`` is served by its ``retrieve``, which bumps whatever ``bump``
    says, each record's match the seed's plain share."""
    search = getattr(store, "search", None)
    if search is not None:
        strict_search = getattr(store, "search_strict", None) if strict else None
        hits = list(await (strict_search or search)(scope_key, query, limit, bump=bump))
    else:
        words = query_terms(query).terms
        hits = [Hit(record, keyword_match(words, record))
                for record in await store.retrieve(scope_key, query, limit)]
    check_own(scope_key, (hit.record for hit in hits))
    return hits


def refuse_after_close(store: object, name: str) -> None:
    """Make every async call of ``store`` but ``close`` raise ``StoreError`` from now on, as
    a closed SQL store's do: for a store with no connection to lose (the in-process one,
    whose write would otherwise report success for records nobody reads again)."""

    async def closed(*_args: object, **_kwargs: object) -> NoReturn:
        raise StoreError(f"the {name} store is closed")

    for attribute in dir(store):
        if attribute != "close" and not attribute.startswith("_") \
                and inspect.iscoroutinefunction(getattr(store, attribute)):
            setattr(store, attribute, closed)
