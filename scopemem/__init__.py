"""scopemem: cross-session memory for chat and coding agents.

Integrators need only what is exported here::

    from scopemem import Memory, Request, hookimpl

Each name is imported on first use, so a command or a plugin that imports one submodule
loads only what that submodule needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scopemem.plugins.lazy import exports

if TYPE_CHECKING:
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

#: Where each public name lives: imported on first use (PEP 562), so that importing a
#: submodule (the command line, a store plugin) never pays for the whole API.
_EXPORTS: dict[str, str] = {
    "Caller": "scopemem.api",
    "Candidate": "scopemem.core.records",
    "ConfigError": "scopemem.errors",
    "ForgetResult": "scopemem.api",
    "Kind": "scopemem.core.records",
    "ListResult": "scopemem.api",
    "ListSection": "scopemem.api",
    "Memory": "scopemem.api",
    "MemoryConfig": "scopemem.config",
    "MemoryContext": "scopemem.api",
    "MemoryRefused": "scopemem.api",
    "OperationFailed": "scopemem.api",
    "PluginError": "scopemem.errors",
    "REFUSAL_REASONS": "scopemem.api",
    "Record": "scopemem.core.records",
    "RememberResult": "scopemem.api",
    "Request": "scopemem.core.requests",
    "Run": "scopemem.api",
    "RunActor": "scopemem.core.policy",
    "ScopeKind": "scopemem.core.requests",
    "ScopeRefused": "scopemem.core.requests",
    "ScopeSweep": "scopemem.api",
    "ScopememError": "scopemem.errors",
    "SearchHit": "scopemem.api",
    "SearchResult": "scopemem.api",
    "Status": "scopemem.core.records",
    "StoreError": "scopemem.errors",
    "SweepReport": "scopemem.api",
    "SweepResult": "scopemem.core.records",
    "SyncMemory": "scopemem.api",
    "Visibility": "scopemem.core.policy",
    "WriteCounts": "scopemem.core.records",
    "WriteDecision": "scopemem.core.policy",
    "handle_command": "scopemem.chat",
    "hookimpl": "scopemem.plugins.markers",
    "hookspec": "scopemem.plugins.markers",
    "load_config": "scopemem.config",
}

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


__getattr__ = exports(__name__, _EXPORTS)
