"""The records memory stores, the candidates reflection offers, and their wire format.

Everything here is immutable (attrs, frozen) so an engine function can never change a record
behind a store's back: a change is a new value the store decides to persist. Times are integer
milliseconds since the epoch, as on the wire.

One cattrs converter (``to_wire``, ``from_wire``) owns the JSON shape the Memory Worker
speaks (``core.wire``: camelCase keys, absent optionals omitted, unknown keys ignored, no lossy
coercion). It is built on first use: cattrs and the converter's generated functions cost more
than the rest of a command's start.
"""

from __future__ import annotations

import enum
import functools
import math
import operator
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from scopemem.core.wire import WireError as WireError
from scopemem.core.wire import converter_for, describe

if TYPE_CHECKING:
    import cattrs

# Limits shared by every boundary that accepts records (the worker's validator, the client,
# reflection's parser) so they cannot drift apart.
MAX_TEXT_CHARS = 4000
MAX_QUERY_CHARS = 4000
MAX_KEYWORDS = 20
MAX_KEYWORD_CHARS = 64
MAX_BATCH = 50
MAX_LIMIT = 50
MAX_ID_CHARS = 200
# A candidate's provenance (its ``sourceThreadKey`` and ``sourceRunId``): the scope key's cap.
MAX_SOURCE_CHARS = 200
# A /used request: at most this many scopes, and this many ids in all.
MAX_USED_SCOPES = 32
MAX_USED_IDS = 256
# Moving records between stores (``scopemem export`` / ``import``, the worker's /export,
# /scopes and /import): records per /import body, records per /export page, scope keys per
# /scopes page, and the bounds of what an imported record may carry.
MAX_IMPORT_BATCH = 25
MAX_EXPORT_PAGE = 100
MAX_SCOPES_PAGE = 1000
MAX_SEQ = 10**18 - 1
MAX_IMPORT_INT = 2**53 - 1
# The most bytes of records a client puts in one /import body: half the worker's default
# body limit, so a batch of long non-ASCII records is split rather than refused.
MAX_IMPORT_BYTES = 256 * 1024
# Counters: rows per /counts body, scope keys per /stats body.
MAX_COUNT_ROWS = 512
MAX_STATS_SCOPES = 100
DEFAULT_SCOPE_CAP = 500
# The smallest ``max_tokens`` (``config`` refuses less) that always holds the block's prefix
# naming the four built-in scopes with keys of 200 characters each (the longest a key may be;
# a key with characters to escape renders longer), the fences, and one cut bullet of about a
# hundred characters (the block is ``core.scoring``'s).
MIN_BLOCK_TOKENS = 256
MAX_SCOPE_CAP = 10_000
# How long a superseded, evicted or swept record keeps its text (an audit of what a sweep or
# the cap retired) before the store purges it (``memory.retention_days``).
DEFAULT_RETENTION_DAYS = 30
MAX_RETENTION_DAYS = 36_500


class Kind(enum.StrEnum):
    FACT = "fact"
    SUMMARY = "summary"


class Source(enum.StrEnum):
    """Who stated a record. A person's ``remember`` outranks the extractor's inference: a
    reflection candidate may retire (supersede) only a reflection record."""

    HUMAN = "human"
    REFLECTION = "reflection"


class Status(enum.StrEnum):
    """A record's lifecycle. Only ``active`` rows are ever read, listed, deduped or counted;
    every other status is a soft delete that keeps the row and its provenance."""

    ACTIVE = "active"
    SUPERSEDED = "superseded"
    FORGOTTEN = "forgotten"
    EVICTED = "evicted"
    SWEPT = "swept"


def _non_empty(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not value:
        raise ValueError(f"{attribute.name} must be a non-empty string")


def _optional_unit_interval(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"{attribute.name} must be a number in [0, 1], got {value!r}")
    if math.isnan(value):
        raise ValueError(f"{attribute.name} must not be NaN")


#: The statuses whose rows a store keeps with their text scrubbed to "": a forgotten row at
#: once, a swept row once past the retention (its id, status and provenance stay auditable).
SCRUBBED_STATUSES = frozenset({Status.FORGOTTEN, Status.SWEPT})


def _text(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    """A record's text: non-empty, except a scrubbed one's (``SCRUBBED_STATUSES``)."""
    if not value and getattr(instance, "status", None) not in SCRUBBED_STATUSES:
        raise ValueError(f"{attribute.name} must be a non-empty string")


def _non_negative_int(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative integer, got {value!r}")


def _optional_non_negative_int(instance: object, attribute: attrs.Attribute[Any],
                               value: Any) -> None:
    if value is not None:
        _non_negative_int(instance, attribute, value)


def _str_tuple(value: Any) -> tuple[str, ...]:
    return tuple(value)


def _optional_str_tuple(value: Any) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)


@attrs.frozen(kw_only=True)
class Record:
    """One distilled memory, as stored in exactly one scope."""

    id: str = attrs.field(validator=_non_empty)
    scope_key: str = attrs.field(validator=_non_empty)
    kind: Kind = attrs.field(converter=Kind)
    # Never empty, but for a scrubbed record (no text, no keywords): a forgotten one, or a
    # swept one past the retention.
    text: str = attrs.field(validator=_text)
    keywords: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    # Provenance: which thread and which run produced this record, so it can be re-grounded.
    source_thread_key: str
    source_run_id: str | None = None
    created_at: int = attrs.field(validator=_non_negative_int)
    last_used_at: int | None = attrs.field(default=None, validator=_optional_non_negative_int)
    use_count: int = attrs.field(default=0, validator=_non_negative_int)
    confidence: float | None = attrs.field(default=None, validator=_optional_unit_interval)
    supersedes: str | None = None
    restates: str | None = None
    status: Status = attrs.field(default=Status.ACTIVE, converter=Status)
    # Who stated it. Rows stored before records carried a source read back as reflection,
    # the producer of nearly all of them (and the rule that predates the field).
    source: Source = attrs.field(default=Source.REFLECTION, converter=Source)

    @property
    def is_active(self) -> bool:
        return self.status is Status.ACTIVE

    @property
    def last_touched(self) -> int:
        """When the record was last useful: last use, else creation (recency and eviction)."""
        return self.created_at if self.last_used_at is None else self.last_used_at


_KINDS = {kind.value: kind for kind in Kind}
_STATUSES = {status.value: status for status in Status}
_SOURCES = {source.value: source for source in Source}


# The slot descriptors' setters, in field order: a frozen class refuses ``setattr``, and
# calling a slot's own setter skips the lookup ``object.__setattr__`` makes by name.
(_set_id, _set_scope_key, _set_kind, _set_text, _set_keywords, _set_source_thread_key,
 _set_source_run_id, _set_created_at, _set_last_used_at, _set_use_count, _set_confidence,
 _set_supersedes, _set_restates, _set_status, _set_source) = (
    Record.__dict__[field.name].__set__ for field in attrs.fields(Record))
_new_record = object.__new__


def trusted_record(
    id: str,  # noqa: A002 - the field's name
    scope_key: str,
    kind: str,
    text: str,
    keywords: tuple[str, ...],
    source_thread_key: str,
    source_run_id: str | None,
    created_at: int,
    last_used_at: int | None,
    use_count: int,
    confidence: float | None,
    supersedes: str | None,
    restates: str | None,
    status: str,
    source: str,
) -> Record:
    """A ``Record`` built without running its validators, for values a store read back from
    its own storage (which only ever held validated records). Arguments are positional in
    field order. ``kind``, ``status`` and ``source`` are converted exactly as the constructor
    converts them, so the result equals ``Record(...)`` of the same values; anything the
    validators would have refused is the caller's responsibility."""
    record = _new_record(Record)
    _set_id(record, id)
    _set_scope_key(record, scope_key)
    _set_kind(record, _KINDS.get(kind) or Kind(kind))
    _set_text(record, text)
    _set_keywords(record, tuple(keywords))
    _set_source_thread_key(record, source_thread_key)
    _set_source_run_id(record, source_run_id)
    _set_created_at(record, created_at)
    _set_last_used_at(record, last_used_at)
    _set_use_count(record, use_count)
    _set_confidence(record, confidence)
    _set_supersedes(record, supersedes)
    _set_restates(record, restates)
    _set_status(record, _STATUSES.get(status) or Status(status))
    _set_source(record, _SOURCES.get(source) or Source(source))
    return record


def stored_record_problem(record: Record) -> str | None:
    """What makes ``record``, built by ``trusted_record`` from a row a store read back, not a
    record any store writes, as ``"<field>: <why>"``; None when it is one. A store's files or
    schema can be written by another program, so a row is checked before anything renders,
    ranks or exports it: its fields as the constructor checks them, its text, keywords and
    provenance strings, and its id one of its own scope's (``mem:<scope key>:<n>``)."""
    try:
        attrs.validate(record)
    except (TypeError, ValueError) as exc:
        field = str(exc).split(" ", 1)[0]
        return f"{field}: {exc}"
    for name in ("text", "source_thread_key"):
        if type(getattr(record, name)) is not str:
            return f"{name}: not a string"
    for name in ("source_run_id", "supersedes", "restates"):
        value = getattr(record, name)
        if value is not None and type(value) is not str:
            return f"{name}: not a string"
    if not all(type(word) is str for word in record.keywords):
        return "keywords: not a list of words"
    if not record.id.startswith(f"mem:{record.scope_key}:"):
        return f"id: {record.id!r} is not an id of scope {record.scope_key}"
    return None


def with_uses(record: Record, uses: int, last_used_at: int | None) -> Record:
    """``attrs.evolve(record, use_count=record.use_count + uses, last_used_at=...)`` without
    running every field's validator again: only the two changed fields are checked (the
    rest are the valid record's own). A retrieval builds one per record it returns."""
    if (isinstance(uses, bool) or not isinstance(uses, int) or uses < 0
            or last_used_at is not None and (isinstance(last_used_at, bool)
                                             or not isinstance(last_used_at, int)
                                             or last_used_at < 0)):
        return attrs.evolve(record, use_count=record.use_count + uses,
                            last_used_at=last_used_at)  # raises as the constructor does
    # Field by field, spelled out: a loop over the fields' descriptors cost three times as
    # much, and a worker's retrieval builds one of these per record it returns.
    copy = _new_record(Record)
    _set_id(copy, record.id)
    _set_scope_key(copy, record.scope_key)
    _set_kind(copy, record.kind)
    _set_text(copy, record.text)
    _set_keywords(copy, record.keywords)
    _set_source_thread_key(copy, record.source_thread_key)
    _set_source_run_id(copy, record.source_run_id)
    _set_created_at(copy, record.created_at)
    _set_last_used_at(copy, last_used_at)
    _set_use_count(copy, record.use_count + uses)
    _set_confidence(copy, record.confidence)
    _set_supersedes(copy, record.supersedes)
    _set_restates(copy, record.restates)
    _set_status(copy, record.status)
    _set_source(copy, record.source)
    return copy


@attrs.frozen(kw_only=True)
class Candidate:
    """A record a writer offers to a scope; the store's plan decides what becomes of it."""

    kind: Kind = attrs.field(converter=Kind)
    text: str = attrs.field(validator=_non_empty)
    source_thread_key: str
    source_run_id: str | None = None
    # None means "no keywords given": the store tokenizes the text instead.
    keywords: tuple[str, ...] | None = attrs.field(default=None, converter=_optional_str_tuple)
    confidence: float | None = attrs.field(default=None, validator=_optional_unit_interval)
    # An empty string is carried as given but treated as "no pointer" by the engine.
    supersedes: str | None = None
    restates: str | None = None
    source: Source = attrs.field(default=Source.REFLECTION, converter=Source)


@attrs.frozen
class WriteCounts:
    """What one ``write`` did, per action. Added together across scopes for the log line.

    ``outranked`` counts reflection candidates whose ``supersedes`` named a record a person
    stated: the candidate was inserted beside it (and counted in ``inserted`` too).
    ``inserted_summaries`` says how many of ``inserted`` were summaries, so a log can count
    the lessons a write added apart from the run's summary (a worker older than the field
    omits it: 0). ``dropped`` counts the candidates dropped as noise before anything was
    planned."""

    inserted: int = 0
    deduped: int = 0
    superseded: int = 0
    restated: int = 0
    evicted: int = 0
    outranked: int = 0
    inserted_summaries: int = 0
    # Candidates the salience rule dropped as noise (``core.hygiene.noise_reason``): never
    # stored, and in no other count.
    dropped: int = 0

    def __add__(self, other: WriteCounts) -> WriteCounts:
        if not isinstance(other, WriteCounts):
            return NotImplemented
        # Field by field: a store adds one action's counts per candidate, and the generic
        # ``attrs.astuple`` route cost more than the rest of planning the candidate.
        return WriteCounts(self.inserted + other.inserted, self.deduped + other.deduped,
                           self.superseded + other.superseded,
                           self.restated + other.restated, self.evicted + other.evicted,
                           self.outranked + other.outranked,
                           self.inserted_summaries + other.inserted_summaries,
                           self.dropped + other.dropped)

    @staticmethod
    def total(parts: Iterable[WriteCounts]) -> WriteCounts:
        """The sum of ``parts`` (a write's, one a candidate), made once: adding them one by
        one makes a ``WriteCounts`` per candidate."""
        return WriteCounts(*map(sum, zip(*map(_count_fields, parts), strict=True)))


_count_fields = operator.attrgetter(*(field.name for field in attrs.fields(WriteCounts)))


@attrs.frozen
class SweepResult:
    """How many active facts the gate retired; ``ids`` only for a dry run."""

    swept: int
    ids: tuple[str, ...] | None = attrs.field(default=None, converter=_optional_str_tuple)


@attrs.frozen
class PurgeResult:
    """What a retention purge did: dead rows past the retention deleted (superseded,
    evicted), and swept rows past it scrubbed of their text (kept)."""

    purged: int = 0
    scrubbed: int = 0

    def __add__(self, other: PurgeResult) -> PurgeResult:
        return PurgeResult(self.purged + other.purged, self.scrubbed + other.scrubbed)


@attrs.frozen
class CountRow:
    """One counter of one scope on one UTC day (days since the epoch; ``core.counters``
    names the counters and adds rows up)."""

    scope_key: str
    day: int
    name: str
    value: int


# --- the wire format (``core.wire``) ----------------------------------------------------------

T = TypeVar("T")


@functools.cache
def _build_wire_converter() -> cattrs.Converter:
    # Records are what retrievals answer, many per response: a hand-written writer.
    return converter_for((Record, Candidate, WriteCounts, SweepResult, CountRow),
                         (Kind, Status, Source), unstructure=((Record, _record_to_wire),))


def _record_to_wire(record: Record) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": record.id,
        "scopeKey": record.scope_key,
        "kind": record.kind.value,
        "text": record.text,
        "keywords": list(record.keywords),
        "sourceThreadKey": record.source_thread_key,
    }
    if record.source_run_id is not None:
        data["sourceRunId"] = record.source_run_id
    data["createdAt"] = record.created_at
    if record.last_used_at is not None:
        data["lastUsedAt"] = record.last_used_at
    data["useCount"] = record.use_count
    if record.confidence is not None:
        data["confidence"] = record.confidence
    if record.supersedes is not None:
        data["supersedes"] = record.supersedes
    if record.restates is not None:
        data["restates"] = record.restates
    data["status"] = record.status.value
    data["source"] = record.source.value
    return data


def to_wire(value: Any) -> Any:
    """The JSON-ready form of a record, candidate, counts or sweep result (or a list of them)."""
    return _build_wire_converter().unstructure(value)


def from_wire(data: Mapping[str, Any], cls: type[T]) -> T:
    """Parse one wire object; raises ``WireError`` naming what was wrong."""
    import cattrs

    try:
        return _build_wire_converter().structure(data, cls)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        raise WireError(describe(exc)) from exc
