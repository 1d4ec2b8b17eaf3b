"""The four built-in scope kinds: org, repo, channel, user (widest first).

Org comes from ``memory.organization`` (the installation's one shared resource; no code names
an org). The others come from the request's ids, which adapters already namespace by
platform (``slack:U0123``), so ``user:slack:U0123`` can never collide with a Discord user.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scopemem.plugins.markers import hookimpl

if TYPE_CHECKING:
    from scopemem.config import MemoryConfig
    from scopemem.core.requests import Request, ScopeKind

ORG, REPO, CHANNEL, USER = "org", "repo", "channel", "user"


def _prefixed(kind: str, value: str | None) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str) and value.endswith(":"):
        # ``slack:`` from an adapter whose id came back empty: every such person would
        # share one scope.
        from scopemem.core.requests import ScopeRefused

        raise ScopeRefused(f"the {kind} id {value!r} is empty after its namespace")
    if isinstance(value, str) and value.startswith(f"{kind}:"):
        # ``Caller.user_key`` passed as ``Request.user_id``: ``user:user:slack:U0123`` is a
        # scope the person's own commands never read, as the command line's --user says.
        from scopemem.core.requests import ScopeRefused

        raise ScopeRefused(f"the {kind} id {value!r} is the {kind} scope's key: pass the "
                           f"platform id, {value[len(kind) + 1:]!r}")
    return f"{kind}:{value}"


def _repo(request: Request) -> str | None:
    repo = request.repo
    return _prefixed(REPO, repo) if isinstance(repo, str) else None


@hookimpl
def scopemem_scope_kinds(config: MemoryConfig) -> list[ScopeKind]:
    from scopemem.core.requests import ScopeKind, ScopeRefused  # not for a command's start

    organization = config.organization

    def org(_request: Request) -> str:
        if not organization:
            raise ScopeRefused("the org scope needs memory.organization")
        return f"{ORG}:{organization}"

    return [
        ScopeKind(ORG, 0, org),
        ScopeKind(REPO, 10, _repo),
        ScopeKind(CHANNEL, 20, lambda request: _prefixed(CHANNEL, request.channel_id)),
        ScopeKind(USER, 30, lambda request: _prefixed(USER, request.user_id)),
    ]
