"""One retry policy for every HTTP client the project has: the worker client
(``stores.worker``) and the model providers (``plugins.builtin_providers``).

A call is retried when an attempt fails in a way another may not (``Transient``), spaced by
tenacity's exponential backoff with full jitter or the server's ``Retry-After``, all within
``deadline`` (each attempt's timeout is cut to what is left, its ``budget``). ``Breaker``
stops calling a server that keeps failing. What counts as transient, and the figures:
``docs/worker.md`` ("Retries and the idempotency key").
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Awaitable, Callable
from datetime import UTC
from typing import TypeVar

T = TypeVar("T")

#: The statuses a server sends when another attempt later may succeed.
TRANSIENT_STATUSES = frozenset({429, 503})
DEFAULT_DEADLINE = 10.0
#: The first backoff and the longest one (jitter spreads each over [0, that]).
INITIAL_WAIT = 0.25
MAX_WAIT = 4.0
MAX_ATTEMPTS = 5


class Transient(Exception):
    """An attempt that failed in a way another attempt may not; ``retry_after`` is the wait
    the server asked for, in seconds (None: none asked)."""

    def __init__(self, cause: Exception, retry_after: float | None = None) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.retry_after = retry_after


class BreakerOpen(Exception):
    """The breaker is open: the server failed too often lately, so no call was made."""


def retry_after(value: str | None, now: Callable[[], float] = time.time) -> float | None:
    """A ``Retry-After`` header's wait in seconds (delta-seconds or an HTTP date), or None
    when there is none or it cannot be read."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now())


class RetryPolicy:
    """Attempts of one call within ``deadline`` seconds: at most ``attempts`` of a read, and
    of a change ``change_attempts`` (None: as many as the deadline holds)."""

    def __init__(self, deadline: float = DEFAULT_DEADLINE, *, attempts: int = MAX_ATTEMPTS,
                 change_attempts: int | None = None,
                 initial: float = INITIAL_WAIT, most: float = MAX_WAIT,
                 sleep: Callable[[float], Awaitable[None]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if isinstance(deadline, bool) or not isinstance(deadline, int | float) or deadline <= 0:
            raise ValueError(f"deadline must be a positive number of seconds, got {deadline!r}")
        self.deadline = float(deadline)
        self.attempts = attempts
        # A change (a write) is tried until the deadline unless capped: given up, it is lost,
        # where a read given up costs a turn some records.
        self.change_attempts = change_attempts
        self.initial = initial
        self.most = most
        self._sleep = sleep if sleep is not None else asyncio.sleep
        self._clock = clock

    async def run(self, attempt: Callable[[float], Awaitable[T]], *,
                  change: bool = False) -> T:
        """``attempt(budget)`` (the seconds left) until it returns or raises something other
        than ``Transient``; when the attempts or the deadline run out, the last
        ``Transient``'s cause is raised."""
        import tenacity  # here: importing a client costs nothing until it calls

        attempts = self.change_attempts if change else self.attempts
        start = self._clock()
        backoff = tenacity.wait_random_exponential(multiplier=self.initial, max=self.most)

        def wait(state: tenacity.RetryCallState) -> float:
            """The server's ``Retry-After`` when it sent one, else the backoff."""
            failure = state.outcome.exception() if state.outcome is not None else None
            if isinstance(failure, Transient) and failure.retry_after is not None:
                return failure.retry_after
            return float(backoff(state))

        retrying = tenacity.AsyncRetrying(
            stop=(tenacity.stop_before_delay(self.deadline) if attempts is None
                  else tenacity.stop_after_attempt(attempts)
                  | tenacity.stop_before_delay(self.deadline)),
            wait=wait,
            retry=tenacity.retry_if_exception_type(Transient),
            reraise=True,
            sleep=self._sleep,
        )
        try:
            async for round_ in retrying:
                with round_:
                    left = self.deadline - (self._clock() - start)
                    return await attempt(max(left, 0.001))
        except Transient as exc:
            raise exc.cause from None
        raise AssertionError("unreachable: tenacity either returns or raises")


class Breaker:
    """Open after ``threshold`` transient failures in a row, for ``cool_down`` seconds; then
    one call is let through, and its outcome closes or reopens it."""

    def __init__(self, threshold: int = 5, cool_down: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold = threshold
        self.cool_down = cool_down
        self._clock = clock
        self.failures = 0
        self.opened_at: float | None = None

    @property
    def is_open(self) -> bool:
        return (self.opened_at is not None
                and self._clock() - self.opened_at < self.cool_down)

    def check(self) -> None:
        """Raise ``BreakerOpen`` while open; after the cool-down, let one call through."""
        if self.is_open:
            raise BreakerOpen(f"not called for {self.cool_down:g}s after {self.threshold}"
                              " failures in a row")
        if self.opened_at is not None:  # half-open: this call decides
            self.opened_at = self._clock()

    def succeeded(self) -> None:
        self.failures = 0
        self.opened_at = None

    def failed(self) -> bool:
        """Count a failure; True when this one opened the breaker."""
        self.failures += 1
        was_open = self.opened_at is not None
        if self.failures >= self.threshold:
            self.opened_at = self._clock()
            return not was_open
        return False
