"""scopemem: cross-session memory for chat and coding agents.

Integrators need only what is exported here::

    from scopemem import Memory, Request, hookimpl
"""

from scopemem.config import MemoryConfig, load_config
from scopemem.core.policy import RunActor, Visibility, WriteDecision
from scopemem.core.records import Candidate, Kind, Record, Status, SweepResult, WriteCounts
from scopemem.core.requests import Request, ScopeKind, ScopeRefused
from scopemem.errors import ConfigError, PluginError, ScopememError, StoreError
from scopemem.memory import Memory
from scopemem.plugins.markers import hookimpl, hookspec
from scopemem.reflecting import Run

__all__ = [
    "Candidate",
    "ConfigError",
    "Kind",
    "Memory",
    "MemoryConfig",
    "PluginError",
    "Record",
    "Request",
    "Run",
    "RunActor",
    "ScopeKind",
    "ScopeRefused",
    "ScopememError",
    "Status",
    "StoreError",
    "SweepResult",
    "Visibility",
    "WriteCounts",
    "WriteDecision",
    "hookimpl",
    "hookspec",
    "load_config",
]
