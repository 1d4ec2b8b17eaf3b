"""The built-in write policy: a write to a scope everyone reads (the org's, a plugin kind's
such as a guild's) may only come from an origin everyone could already see.

* From a DM (one person's conversation) such a write narrows to that person's own scope,
  else to the channel's.
* From a private channel, or an origin that is unstamped or unknown, it narrows to the
  channel's scope (the origin's own audience, ``core.policy.audience_of``: the read gate
  opens it to that channel only), else to the user's.
* Never to the repo scope: a repository's readers span every channel it is used from.
* Public and machine origins keep the routing; user, channel and repo writes are never moved.
* With nowhere narrower to go the write is denied with a reason, never dropped silently.
"""

from __future__ import annotations

from scopemem.core.policy import (
    AUDIENCE_KINDS,
    Audience,
    RunActor,
    Visibility,
    WriteDecision,
    audience_of,
    first_available,
    parse_visibility,
)
from scopemem.core.records import Candidate
from scopemem.core.scopes import scope_kind
from scopemem.plugins.markers import hookimpl

_NARROWING: dict[Visibility | None, tuple[str, tuple[Audience, ...]]] = {
    Visibility.DM: ("dm_origin", (Audience.PERSON, Audience.ORIGIN)),
    Visibility.PRIVATE: ("private_origin", (Audience.ORIGIN, Audience.PERSON)),
    None: ("unknown_origin", (Audience.ORIGIN, Audience.PERSON)),
}


@hookimpl(trylast=True)
def scopemem_authorize_write(
    actor: RunActor, target: str, candidate: Candidate, origin: str | None
) -> WriteDecision:
    # What everyone reads (org, a plugin's kind) is narrowed; user and channel scopes have
    # their own audience, and a repository's facts stay with it (003: its readers are every
    # channel it is used from, which the window is for).
    if audience_of(target) is not Audience.EVERYONE or scope_kind(target) == "repo":
        return WriteDecision.allow(target)
    visibility = parse_visibility(origin)
    if visibility in (Visibility.PUBLIC, Visibility.MACHINE):
        return WriteDecision.allow(target)
    reason, audiences = _NARROWING[visibility]
    narrowed = first_available(actor, [AUDIENCE_KINDS[audience] for audience in audiences])
    if narrowed is None:
        return WriteDecision.deny(f"{reason}_no_scope")
    return WriteDecision.narrow(narrowed, reason)
