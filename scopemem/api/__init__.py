"""The typed programmatic API: the ``Memory`` facade (read path, reflection, the manual
operations) that every surface above it (chat, CLI, worker, MCP, hooks) is built on."""

from scopemem.api.memory import Memory, MemoryContext
from scopemem.api.reflecting import ReflectionReport, Run

__all__ = ["Memory", "MemoryContext", "ReflectionReport", "Run"]
