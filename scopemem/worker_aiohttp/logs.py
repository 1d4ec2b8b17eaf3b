"""Logs that a flood cannot fill: the same error, repeated, is written a few times a minute.

A worker under attack (or out of file descriptors) can fail the same way thousands of times
a second, each failure a traceback; written out, that is megabytes a second of the same
lines, and the lines that matter scroll away. ``RepeatLimit`` is a ``logging.Filter`` for the
worker's handlers: of the records sharing a logger, a level, a message template and an
exception type, at most ``burst`` pass in a ``window`` of seconds (counted from the first of
them); the rest are counted, and the next one that passes says how many were left out.
Distinct messages are never held back, and records below WARNING pass untouched (the access
log and INFO lines are one line each already).

``JsonFormatter`` writes each record as one JSON object on one line (``serve --log-format
json``), for a log shipper: ``time`` (UTC, ISO 8601 with milliseconds), ``level``,
``logger``, ``message`` (the text line's message, formatted), ``exception`` (the traceback,
when there is one) and ``trace_id`` when a span is current (``scopemem.tracing``, when
OpenTelemetry is installed and a span is being recorded; absent otherwise). It carries
what the text lines carry and nothing more: the worker logs scope keys, counts and request
lines, never a record's text or a request's body.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from scopemem import tracing

__all__ = ["JsonFormatter", "RepeatLimit", "install"]


class RepeatLimit(logging.Filter):
    def __init__(self, burst: int = 5, window: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, max_keys: int = 1024) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self._clock = clock
        self._max_keys = max_keys
        self._lock = threading.Lock()
        # (logger, level, template, exception type) → [window start, passed, suppressed]
        self._seen: dict[tuple[str, int, str, str], list[float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        exc_type = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] \
            else ""
        key = (record.name, record.levelno, str(record.msg), exc_type)
        now = self._clock()
        with self._lock:
            entry = self._seen.get(key)
            if entry is None or now - entry[0] >= self.window:
                suppressed = int(entry[2]) if entry is not None else 0
                if len(self._seen) >= self._max_keys and entry is None:
                    self._seen.clear()  # a bound on memory, not an LRU
                self._seen[key] = [now, 1, 0]
                if suppressed:
                    record.msg = f"{record.msg} [{suppressed} more like this left out]"
                return True
            if entry[1] < self.burst:
                entry[1] += 1
                return True
            entry[2] += 1
            return False


def install(limit: RepeatLimit | None = None) -> RepeatLimit:
    """Put one ``RepeatLimit`` on every handler of the root logger (once), so the worker's,
    aiohttp's and asyncio's repeated errors are all bounded."""
    limit = limit or RepeatLimit()
    for handler in logging.getLogger().handlers:
        if not any(isinstance(existing, RepeatLimit) for existing in handler.filters):
            handler.addFilter(limit)
    return limit


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        trace_id = getattr(record, "trace_id", None) or tracing.current_trace_id()
        if trace_id is not None:
            entry["trace_id"] = str(trace_id)
        # ensure_ascii: a control or separator character in a message stays escaped, so
        # one record is always one line.
        return json.dumps(entry, ensure_ascii=True)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{seconds}.{int(record.msecs):03d}Z"
