"""scopemem: cross-session memory for chat and coding agents.

Integrators need only what is exported here::

    from scopemem import Memory, Request, hookimpl
"""

from scopemem.api.memory import Memory
from scopemem.api.reflecting import Run
from scopemem.chat.commands import handle_command
from scopemem.config import MemoryConfig, load_config
from scopemem.core.policy import RunActor, Visibility, WriteDecision
from scopemem.core.records import Candidate, Kind, Record, Status, SweepResult, WriteCounts
from scopemem.core.requests import Request, ScopeKind, ScopeRefused
from scopemem.errors import ConfigError, PluginError, ScopememError, StoreError
from scopemem.plugins.markers import hookimpl, hookspec

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
    "handle_command",
    "hookimpl",
    "hookspec",
    "load_config",
]
