"""The typed programmatic API: the ``Memory`` facade (read path, reflection, the manual
operations) that every surface above it (chat, CLI, worker, MCP, hooks) is built on, and
``SyncMemory``, the same API blocking."""

from typing import TYPE_CHECKING

from scopemem.plugins.lazy import exports

if TYPE_CHECKING:
    from scopemem.api.finished_run import ReflectionReport, Run
    from scopemem.api.memory import Memory, MemoryContext
    from scopemem.api.results import (
        REFUSAL_REASONS,
        Caller,
        ForgetResult,
        ListResult,
        ListSection,
        MemoryRefused,
        OperationFailed,
        RememberResult,
        ScopeSweep,
        SearchHit,
        SearchResult,
        SweepReport,
    )
    from scopemem.api.sync import SyncMemory

__all__ = [
    "REFUSAL_REASONS",
    "Caller",
    "ForgetResult",
    "ListResult",
    "ListSection",
    "Memory",
    "MemoryContext",
    "MemoryRefused",
    "OperationFailed",
    "ReflectionReport",
    "RememberResult",
    "Run",
    "ScopeSweep",
    "SearchHit",
    "SearchResult",
    "SweepReport",
    "SyncMemory",
]

# Imported on first use: a hook that reads needs ``Memory``, not reflection's machinery.
__getattr__ = exports(__name__, {
    "Memory": "scopemem.api.memory",
    "MemoryContext": "scopemem.api.memory",
    "ReflectionReport": "scopemem.api.finished_run",
    "Run": "scopemem.api.finished_run",
    **{name: "scopemem.api.results" for name in (
        "REFUSAL_REASONS", "Caller", "ForgetResult", "ListResult", "ListSection",
        "MemoryRefused", "OperationFailed", "RememberResult", "ScopeSweep", "SearchHit",
        "SearchResult", "SweepReport")},
    "SyncMemory": "scopemem.api.sync",
})
