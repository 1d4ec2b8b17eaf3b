"""``GET /metrics``: the store's counters in Prometheus' text format, via prometheus-client.

A scrape reads the counters from the store (``CountingStore.read_counts``) and hands the rows
to a ``Collector`` that exists for that one scrape, rendered by prometheus-client's own
``generate_latest``. Nothing lives in a process-global registry: with ``serve --workers N``
every process answers from the same store, so any one of them gives the whole truth, and
two scrapes never disagree because they hit different processes. The application's own
series (requests, store calls, the process: ``observe.py``) follow, from its registry.

Series and their labels:

``scopemem_memory_events_total{kind, counter}``
    a counter per scope kind (``org``, ``repo``, ``channel``, ``user``, a plugin's own) and
    counter name (``core.counters.COUNTER_NAMES``), summed over every scope of the kind and
    every day the store has kept.
``scopemem_memory_rejected_total{kind, marker}``
    facts the gate rejected, per marker.
``scopemem_memory_scopes{kind}``
    how many scopes of the kind have counted anything.

Why no per-scope label: scopes grow with the people and channels an installation serves (one
user scope per person), and a label per scope would grow the series without bound, which is
exactly what Prometheus asks exporters not to do. For the same reason every label value comes
from a small fixed set: a kind the worker does not know (``Labels.kinds``: the registered
scope kinds) and a marker it does not know (``Labels.markers``: the built-in gate's) are
summed under ``other``, so a client inventing scope kinds or marker names on ``/counts`` adds
no series. Counter names are already a fixed set (``/counts`` refuses any other). A per-scope
or per-day reading, with every marker by name, is one ``POST /stats`` (or ``scopemem stats``)
away.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import attrs
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scopemem.core.commands import BUILTIN_KINDS
from scopemem.core.counters import REJECTED_BY, name_order
from scopemem.core.gate import MARKER_NAMES
from scopemem.core.hygiene import NOISE
from scopemem.core.records import CountRow
from scopemem.core.scopes import scope_kind

__all__ = ["CONTENT_TYPE", "OTHER", "CountersCollector", "Labels", "render"]

# The text format prometheus-client writes (``prometheus_client.CONTENT_TYPE_LATEST``).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: The label value of every kind and marker the worker does not know.
OTHER = "other"


def _frozen(names: Iterable[str]) -> frozenset[str]:
    return frozenset(names)


@attrs.frozen
class Labels:
    """The label values a scrape may carry; anything else is ``OTHER``."""

    kinds: frozenset[str] = attrs.field(default=frozenset(BUILTIN_KINDS), converter=_frozen)
    # The built-in gate's markers, and the salience rule's (``core.hygiene.NOISE``).
    markers: frozenset[str] = attrs.field(default=frozenset((*MARKER_NAMES, NOISE)),
                                          converter=_frozen)

    def kind(self, scope_key: str) -> str:
        kind = scope_kind(scope_key)
        return kind if kind in self.kinds else OTHER

    def marker(self, marker: str) -> str:
        return marker if marker in self.markers else OTHER


class CountersCollector(Collector):
    """The series of one scrape, from the rows read for it."""

    def __init__(self, rows: Sequence[CountRow], labels: Labels | None = None) -> None:
        self.rows = rows
        self.labels = labels or Labels()

    def collect(self) -> Iterator[Metric]:
        events: dict[tuple[str, str], int] = {}
        rejected: dict[tuple[str, str], int] = {}
        scopes: dict[str, set[str]] = {}
        for row in self.rows:
            kind = self.labels.kind(row.scope_key)
            scopes.setdefault(kind, set()).add(row.scope_key)
            if row.name.startswith(REJECTED_BY):
                key = (kind, self.labels.marker(row.name.removeprefix(REJECTED_BY)))
                rejected[key] = rejected.get(key, 0) + row.value
            else:
                key = (kind, row.name)
                events[key] = events.get(key, 0) + row.value
        family = CounterMetricFamily(
            "scopemem_memory_events", "What memory did, per scope kind and counter.",
            labels=("kind", "counter"))
        for (kind, name), value in sorted(events.items(),
                                          key=lambda item: (item[0][0],
                                                            name_order(item[0][1]))):
            family.add_metric((kind, name), value)
        yield family
        markers = CounterMetricFamily(
            "scopemem_memory_rejected", "Facts the gate rejected, per scope kind and marker.",
            labels=("kind", "marker"))
        for (kind, marker), value in sorted(rejected.items()):
            markers.add_metric((kind, marker), value)
        yield markers
        gauge = GaugeMetricFamily("scopemem_memory_scopes",
                                  "Scopes that have counted anything, per kind.",
                                  labels=("kind",))
        for kind, keys in sorted(scopes.items()):
            gauge.add_metric((kind,), len(keys))
        yield gauge


def render(rows: Sequence[CountRow] | None, labels: Labels | None = None,
           *more: CollectorRegistry) -> bytes:
    """The exposition text of ``rows`` (none for a store that keeps no counters), through a
    registry of this scrape alone, followed by that of each of ``more`` (the application's
    request and process series)."""
    registry = CollectorRegistry(auto_describe=False)
    if rows is not None:
        registry.register(CountersCollector(rows, labels))
    return generate_latest(registry) + b"".join(generate_latest(other) for other in more)
