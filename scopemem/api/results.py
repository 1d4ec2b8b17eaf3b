"""What the manual operations take and give: the caller, the refusal, the result objects.

Every operation names its caller explicitly (``Caller``): who asks (a person's own user
scope key) and from where (the channel, repository and plugin inputs a scope word is derived
from). Nothing is inferred from the environment, and whether the caller is an admin is the
installation's answer (``memory.admins``), never the caller's claim.

A refusal is raised, never returned: ``MemoryRefused`` carries a stable ``reason`` token (one
of ``REFUSAL_REASONS``) beside the message a person reads. A store that fails is an
``OperationFailed`` naming what failed. Both are ``ScopememError``s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs

from scopemem.core.records import Record, SweepResult, WriteCounts
from scopemem.core.scopes import scope_key_problem
from scopemem.core.text import is_text
from scopemem.errors import ScopememError, StoreError

RepoSource = str | Callable[[], "Awaitable[str | None] | str | None"] | None

#: The reason tokens a ``MemoryRefused`` carries, each with what it means.
REFUSAL_REASONS: Mapping[str, str] = {
    "memory_off": "memory is off (memory.enabled = false): no store is touched",
    "bad_caller": "the caller is not a user scope key such as user:slack:U0123",
    "unknown_scope": "the scope names no registered kind, or is not a valid scope key",
    "scope_unavailable": "the caller's request lacks that scope's input (no repository "
                         "bound, no channel)",
    "closed_scope": "another person's scope, another organisation's, or a kind nobody "
                    "registered: closed to everyone, admins included",
    "admin_only": "changing a shared scope needs an admin, and the caller is not one",
    "one_scope": "the operation writes to one scope, and was given all of them",
    "bad_id": "the text given as a memory id is not one",
    "wrong_scope": "--supersedes names a record of another scope than the one written",
    "empty_text": "there is nothing to remember: the text is empty",
    "too_long": "the text is longer than a record holds",
    "bad_limit": "a limit outside 1 to 50 records",
    "gated": "the status gate refused the text (``markers`` says which markers)",
    "noise": "the text has nothing worth keeping: under 3 characters, no letter or digit, "
             "or a raw telemetry line",
    "gate_off": "a sweep with the status gate off (memory.gate = false): it would retire "
                "facts the writes keep",
}


class MemoryRefused(ScopememError):
    """An operation refused before it touched the store. ``reason`` is one of
    ``REFUSAL_REASONS``; ``message`` says it for a person; ``details`` holds what the
    refusal is about (``id`` of a record, ``markers`` of the gate), for a machine reader."""

    def __init__(self, reason: str, message: str, **details: Any) -> None:
        if reason not in REFUSAL_REASONS:  # a typo here would be a token no caller handles
            raise ValueError(f"unknown refusal reason {reason!r}")
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.details: dict[str, Any] = details


class OperationFailed(StoreError):
    """The store failed an operation the gate allowed: ``what`` names it ("forget of
    mem:org:acme:3"), the cause is chained (``__cause__``)."""

    def __init__(self, what: str, cause: BaseException) -> None:
        super().__init__(f"{what} failed: {cause}")
        self.what = what


def caller_problem(user_key: object) -> str | None:
    """Why ``user_key`` cannot be a caller (``None``: it can)."""
    if (not isinstance(user_key, str) or not user_key.startswith("user:")
            or user_key.endswith(":")):  # ``user:slack:`` names nobody
        return "the caller must be a user scope key such as user:slack:U0123"
    given = user_key[len("user:"):]
    if given.startswith("user:"):
        # As ``Request(user_id=...)`` refuses it: ``user:user:slack:U0123`` is a scope the
        # person's own reads (``user:slack:U0123``) never see.
        return (f"the caller's id {given!r} is the user scope's key: pass the platform id, "
                f"{given[len('user:'):]!r} (user_key={given!r})")
    problem = scope_key_problem(user_key)
    if problem is None and not is_text(user_key):
        problem = "is not valid Unicode text (it holds a lone surrogate)"
    return f"the caller {problem}" if problem else None


@attrs.frozen(kw_only=True)
class Caller:
    """Who runs an operation and from where. ``user_key`` is the person's own user scope
    (``user:slack:U0123``); ``channel_id``, ``repo`` and ``extra`` are what the scope words
    ``channel``, ``repo`` and a plugin's kind are derived from, as a run's ``Request`` has
    them. ``repo`` may be a zero-argument callable (sync or async), called only when an
    operation asks for the repository scope. ``channel_visibility`` is the channel's
    audience, as a run's ``Request`` stamps it: in a channel stamped ``dm`` (one person's
    conversation) its scope is the caller's own, to forget, sweep and remember in."""

    user_key: str
    channel_id: str | None = None
    repo: RepoSource = None
    extra: Mapping[str, str] = attrs.field(factory=dict)
    channel_visibility: str | None = None


@attrs.frozen
class ListSection:
    """One scope's records, newest first, or the ``error`` that cost them."""

    scope_key: str
    records: tuple[Record, ...] = ()
    error: str | None = None


@attrs.frozen
class ListResult:
    """``Memory.list``'s answer: one section per scope, in the order asked for."""

    sections: tuple[ListSection, ...]
    limit: int
    query: str | None = None

    @property
    def ok(self) -> bool:
        """False only when every scope failed."""
        return not self.sections or any(section.error is None for section in self.sections)

    @property
    def records(self) -> tuple[Record, ...]:
        return tuple(record for section in self.sections for record in section.records)


@attrs.frozen
class ForgetResult:
    """Whether ``record_id`` was an active record, and is forgotten now."""

    record_id: str
    forgotten: bool
    #: False when the store dies with the process (see ``RememberResult.durable``).
    durable: bool = attrs.field(default=True, kw_only=True)


@attrs.frozen
class ScopeSweep:
    scope_key: str
    result: SweepResult


@attrs.frozen
class SweepReport:
    """``Memory.sweep``'s answer: what each scope swept (or would, with ``dry_run``)."""

    dry_run: bool
    scopes: tuple[ScopeSweep, ...]

    @property
    def swept(self) -> int:
        return sum(scope.result.swept for scope in self.scopes)


@attrs.frozen
class RememberResult:
    """What ``Memory.remember`` wrote: the scope, the store's counts, whether a secret was
    redacted from the text, and the record it was to replace, if any. ``durable`` is False
    when the write went to a store that dies with the process (the in-process store a bot
    falls back to when its worker token is missing): it is lost at exit."""

    scope_key: str
    counts: WriteCounts
    redacted: bool = False
    supersedes: str | None = None
    durable: bool = attrs.field(default=True, kw_only=True)

    @property
    def outcome(self) -> str:
        """``replaced``, ``inserted``, ``strengthened`` (a restatement or duplicate of an
        active record) or ``kept``."""
        if self.counts.superseded:
            return "replaced"
        if self.counts.inserted:
            return "inserted"
        if self.counts.deduped or self.counts.restated:
            return "strengthened"
        return "kept"

    @property
    def replaced_nothing(self) -> bool:
        """``supersedes`` named no active record: the fact was inserted beside nothing."""
        return bool(self.supersedes and self.counts.inserted and not self.counts.superseded)


@attrs.frozen
class SearchHit:
    """A record that matched, its keyword match in its own scope (in [0, 1]) and the score
    that ranked it among every scope's hits (match and recency, as the read path ranks)."""

    record: Record
    match: float
    score: float


@attrs.frozen
class SearchResult:
    """``Memory.search``'s answer: the hits best first, the scopes searched, and the scopes
    whose store failed (key → reason)."""

    hits: tuple[SearchHit, ...]
    scopes: tuple[str, ...] = ()
    failed: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def records(self) -> tuple[Record, ...]:
        return tuple(hit.record for hit in self.hits)
