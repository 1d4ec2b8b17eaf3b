from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import attrs
import pytest
from hypothesis import settings

from scopemem.core.records import Candidate, Kind

# No example database: the suite's processes (one per xdist worker) would share one folder in
# the checkout; a falsifying example is printed with its failure instead. No deadline per
# example: that is a timing assertion, which a loaded machine fails.
settings.register_profile("scopemem", database=None, deadline=None)
settings.load_profile("scopemem")

DAY_MS = 24 * 60 * 60 * 1000
START_MS = 1_790_000_000_000  # a fixed epoch-millisecond "now" for every test


@attrs.define
class FakeClock:
    """A clock the test moves by hand; stores and Memory take it as ``clock``."""

    now: int = START_MS

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def fact(text: str, **fields: object) -> Candidate:
    fields.setdefault("source_thread_key", "slack:C1/100")
    return Candidate(kind=Kind.FACT, text=text, **fields)


def summary(text: str, **fields: object) -> Candidate:
    fields.setdefault("source_thread_key", "slack:C1/100")
    return Candidate(kind=Kind.SUMMARY, text=text, **fields)


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections: bound and held, never listened on, for
    the test (so no other process, a test running beside this one included, can start
    listening there meanwhile)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
def memory_warnings(caplog: pytest.LogCaptureFixture):
    """The ``[memory]`` warnings logged during a test, as a list of messages."""
    caplog.set_level(logging.WARNING, logger="scopemem")

    def collected() -> list[str]:
        return [r.getMessage() for r in caplog.records
                if r.name.startswith("scopemem") and r.levelno >= logging.WARNING]

    return collected


@pytest.fixture(params=["memory", "sqlite"])
async def embedded_store(request: pytest.FixtureRequest, clock: FakeClock, tmp_path):
    """The in-process store, then the embedded SQLite one in the layout users get (shared
    files in a temp dir)."""
    from scopemem.stores.memory import InMemoryStore
    from scopemem.stores.sqlite_shared import SharedSqliteStore

    if request.param == "memory":
        yield InMemoryStore(clock=clock)
        return
    store = SharedSqliteStore(tmp_path / "data", clock=clock)
    yield store
    await store.close()
