"""A finished run as an adapter hands it to reflection (``Run``), and what one reflection
did (``ReflectionReport``, the counters of its ``[memory]`` line). Apart from the pass
itself (``api.reflecting``), so an adapter that builds runs loads none of it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from scopemem.core.records import WriteCounts
from scopemem.core.reflection import Turn, opted_out
from scopemem.core.requests import Request
from scopemem.core.text import strip_invisible
from scopemem.stores.base import redact_source

__all__ = ["ReflectionReport", "Run", "run_label"]


# A Run is built by an adapter: a wrong field is a TypeError naming it when the run is made,
# never a reflection failing later in the background on something the adapter did not write.


def _of_type(kind: type, what: str) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, kind):
            raise TypeError(f"Run.{attribute.name} must be {what}, got {type(value).__name__}")

    return check


def _optional_str(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"Run.{attribute.name} must be a string or None, got "
                        f"{type(value).__name__}")


def _whole_count(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"Run.{attribute.name} must be a whole number of at least 0, got "
                        f"{value!r}")


def _history(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise TypeError(f"Run.{attribute.name} must be a sequence of turns, got "
                        f"{type(value).__name__}")


def _none_as_empty(value: Any) -> Any:
    return "" if value is None else value


@attrs.frozen(kw_only=True)
class Run:
    """A finished run, as reflection needs it. ``history`` is the thread before this request
    (``Turn``s, ``{"role", "content"}`` dicts or ``(role, content)`` pairs); ``model`` is the
    run's own ``<provider>/<model>`` ref, used when ``memory.model`` is not set.
    ``no_memory`` (or ``<no-memory>`` in the request or thread, or ``request.no_memory``)
    keeps the run out of memory: it is never reflected and writes nothing. A field of the
    wrong type (``answer=None``, a negative ``tool_calls``) is a ``TypeError`` naming it;
    ``thread_key=None`` is no thread key. A run that names no ``thread_key`` or ``run_id``
    takes its request's (``Request.thread_key``, ``run_id``, which the reach log uses)."""

    request: Request = attrs.field(validator=attrs.validators.instance_of(Request))
    answer: str = attrs.field(validator=_of_type(str, "a string"))
    history: Sequence[Turn | Mapping[str, Any] | tuple[str, Any]] = attrs.field(
        default=(), validator=_history)
    tool_calls: int = attrs.field(default=0, validator=_whole_count)
    agent_name: str | None = attrs.field(default=None, validator=_optional_str)
    thread_key: str = attrs.field(default="", converter=_none_as_empty,
                                  validator=_of_type(str, "a string or None"))
    run_id: str | None = attrs.field(default=None, validator=_optional_str)
    model: str | None = attrs.field(default=None, validator=_optional_str)
    no_memory: bool = attrs.field(default=False, validator=_of_type(bool, "True or False"))

    def __attrs_post_init__(self) -> None:
        # Frozen: the fallbacks are set once, here, so every reader sees the same names.
        if not self.thread_key and self.request.thread_key:
            object.__setattr__(self, "thread_key", self.request.thread_key)
        if self.run_id is None and self.request.run_id:
            object.__setattr__(self, "run_id", self.request.run_id)

    @property
    def opted_out(self) -> bool:
        """Whether the run asked to be kept out of memory."""
        return (self.no_memory or self.request.no_memory
                or opted_out(self.request.text, self.history))


def run_label(run_id: str | None) -> str:
    """A run id as a log line shows it: redacted and capped as a record keeps it, on one
    line (its line breaks and whitespace runs one space, its controls and invisible
    characters gone), so an adapter's id cannot forge a ``[memory]`` line."""
    label = " ".join(strip_invisible(redact_source(run_id)).split()) if run_id else ""
    return label or "-"


def _nonzero(pairs: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{name} {n}" for name, n in pairs if n)


@attrs.define
class ReflectionReport:
    """What one reflection did: the counters of the ``[memory]`` line.

    ``counts`` are the stores' answers added up; ``inserted`` on the line counts the facts
    inserted, apart from the run's ``summary``, and ``by_scope`` repeats the counts for each
    target scope so "inserted in the repository scope" can be read off the line."""

    run_id: str | None = None
    skipped: str | None = None
    offered: int = 0
    dropped: int = 0
    dropped_reasons: Counter[str] = attrs.field(factory=Counter)
    rejected: int = 0
    summary: int = 0
    counts: WriteCounts = attrs.field(factory=WriteCounts)
    by_scope: dict[str, WriteCounts] = attrs.field(factory=dict)
    narrowed: Counter[str] = attrs.field(factory=Counter)
    denied: Counter[str] = attrs.field(factory=Counter)
    failed_reads: int = 0
    failed_writes: int = 0
    #: Of ``failed_writes``, those lost because the store could not be reached or failed
    #: (not refused): writing them again later may land them.
    unavailable_writes: int = 0
    written: dict[str, int] = attrs.field(factory=dict)

    @property
    def inserted_facts(self) -> int:
        return self.counts.inserted - self.counts.inserted_summaries

    def log_line(self) -> str:
        head = f"[memory] reflection {run_label(self.run_id)}: "
        if self.skipped is not None:
            return f"{head}skipped {self.skipped}"

        def reasons(counter: Counter[str]) -> str:
            total = sum(counter.values())
            detail = ", ".join(f"{reason} {n}" for reason, n in sorted(counter.items()))
            return f"{total} ({detail})" if total else "0"

        c = self.counts
        # The seed's own trace leads ("offered 4, rejected 1, restated 1, inserted 2,
        # summary 1"), then the rest.
        line = (
            f"{head}offered {self.offered}, rejected {self.rejected}, "
            f"restated {c.restated}, inserted {self.inserted_facts}, summary {self.summary}, "
            f"dropped {reasons(self.dropped_reasons) if self.dropped_reasons else self.dropped}, "
            f"deduped {c.deduped}, superseded {c.superseded}, "
            f"outranked {c.outranked}, evicted {c.evicted}, "
            f"narrowed {reasons(self.narrowed)}, denied {reasons(self.denied)}"
            + (f", failed reads {self.failed_reads}" if self.failed_reads else "")
            + (f", failed writes {self.failed_writes}" if self.failed_writes else "")
        )
        scopes = []
        for key, counts in self.by_scope.items():
            detail = _nonzero([
                ("restated", counts.restated),
                ("inserted", counts.inserted - counts.inserted_summaries),
                ("summary", counts.inserted_summaries), ("deduped", counts.deduped),
                ("superseded", counts.superseded), ("outranked", counts.outranked),
                ("evicted", counts.evicted)])
            scopes.append(f"{key} ({detail or 'nothing new'})")
        return line + (f"; by scope: {', '.join(scopes)}" if scopes else "")
