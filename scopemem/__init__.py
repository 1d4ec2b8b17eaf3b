"""scopemem: cross-session memory for chat and coding agents.

Integrators need only what is exported here::

    from scopemem import Memory, Request, hookimpl
"""

from scopemem.api import (
    REFUSAL_REASONS,
    Caller,
    ForgetResult,
    ListResult,
    ListSection,
    Memory,
    MemoryContext,
    MemoryRefused,
    OperationFailed,
    RememberResult,
    Run,
    ScopeSweep,
    SearchHit,
    SearchResult,
    SweepReport,
    SyncMemory,
)
from scopemem.chat import handle_command
from scopemem.config import MemoryConfig, load_config
from scopemem.core.policy import RunActor, Visibility, WriteDecision
from scopemem.core.records import Candidate, Kind, Record, Status, SweepResult, WriteCounts
from scopemem.core.requests import Request, ScopeKind, ScopeRefused
from scopemem.errors import ConfigError, PluginError, ScopememError, StoreError
from scopemem.plugins.markers import hookimpl, hookspec

__all__ = [
    "REFUSAL_REASONS",
    "Caller",
    "Candidate",
    "ConfigError",
    "ForgetResult",
    "Kind",
    "ListResult",
    "ListSection",
    "Memory",
    "MemoryConfig",
    "MemoryContext",
    "MemoryRefused",
    "OperationFailed",
    "PluginError",
    "Record",
    "RememberResult",
    "Request",
    "Run",
    "RunActor",
    "ScopeKind",
    "ScopeRefused",
    "ScopeSweep",
    "ScopememError",
    "SearchHit",
    "SearchResult",
    "Status",
    "StoreError",
    "SweepReport",
    "SweepResult",
    "SyncMemory",
    "Visibility",
    "WriteCounts",
    "WriteDecision",
    "handle_command",
    "hookimpl",
    "hookspec",
    "load_config",
]
