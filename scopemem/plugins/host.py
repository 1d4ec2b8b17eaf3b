"""The host side of the hooks: call them, then combine the answers with ``scopemem.core``."""

from __future__ import annotations

from collections.abc import Mapping

from scopemem.config import MemoryConfig
from scopemem.core.gate import combine_markers
from scopemem.core.policy import RunActor, WriteDecision, settle_decision
from scopemem.core.records import Candidate
from scopemem.core.requests import ScopeKind, merge_scope_kinds
from scopemem.plugins.manager import PluginManager


def scope_kinds(pm: PluginManager, config: MemoryConfig) -> dict[str, ScopeKind]:
    return merge_scope_kinds(pm.hook.scopemem_scope_kinds(config=config))


def rejection_markers(pm: PluginManager, candidate: Candidate) -> list[str]:
    return combine_markers(pm.hook.scopemem_rejection_markers(candidate=candidate))


def authorize_write(
    pm: PluginManager,
    *,
    actor: RunActor,
    target: str,
    candidate: Candidate,
    origin: str | None,
    breadth: Mapping[str, int],
) -> WriteDecision:
    decision = pm.hook.scopemem_authorize_write(
        actor=actor, target=target, candidate=candidate, origin=origin
    )
    return settle_decision(target, decision, actor, breadth)
