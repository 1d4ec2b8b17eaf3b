"""The built-in write policy: an org-wide write may only come from an origin everyone in the
org could already see.

* From a DM (one person's conversation) an org write narrows to that person's own scope,
  else to the channel's.
* From a private channel, or an origin that is unstamped or unknown, it narrows to the
  channel's scope (the origin's own audience), else to the user's.
* Never to the repo scope: a repository's readers span every channel it is used from.
* Public and machine origins keep the routing; user, channel and repo writes are never moved.
* With nowhere narrower to go the write is denied with a reason, never dropped silently.
"""

from __future__ import annotations

from scopemem.core.policy import (
    RunActor,
    Visibility,
    WriteDecision,
    first_available,
    parse_visibility,
)
from scopemem.core.records import Candidate
from scopemem.core.scopes import scope_kind
from scopemem.plugins.markers import hookimpl

_NARROWING: dict[Visibility | None, tuple[str, tuple[str, ...]]] = {
    Visibility.DM: ("dm_origin", ("user", "channel")),
    Visibility.PRIVATE: ("private_origin", ("channel", "user")),
    None: ("unknown_origin", ("channel", "user")),
}


@hookimpl(trylast=True)
def scopemem_authorize_write(
    actor: RunActor, target: str, candidate: Candidate, origin: str | None
) -> WriteDecision:
    if scope_kind(target) != "org":
        return WriteDecision.allow(target)
    visibility = parse_visibility(origin)
    if visibility in (Visibility.PUBLIC, Visibility.MACHINE):
        return WriteDecision.allow(target)
    reason, kinds = _NARROWING[visibility]
    narrowed = first_available(actor, kinds)
    if narrowed is None:
        return WriteDecision.deny(f"{reason}_no_scope")
    return WriteDecision.narrow(narrowed, reason)
