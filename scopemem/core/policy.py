"""Write authorization: what a policy may answer, and the host's rule that it only narrows;
and who the audience of a scope is, the one rule the write policy and the read gate share.

Reflection routes each candidate to a target scope; a policy plugin then allows the write,
narrows it to another of the run's own scopes, or denies it with a reason token. The host
settles the answer with ``settle_decision``, which refuses any answer that would widen the
audience or reach a scope the run does not have: a buggy or hostile policy can lose a write,
never leak one.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

import attrs

from scopemem.core.scopes import scope_kind


class Visibility(enum.StrEnum):
    """Who could see the conversation a run came from."""

    PUBLIC = "public"
    PRIVATE = "private"
    DM = "dm"
    MACHINE = "machine"


def parse_visibility(value: str | None) -> Visibility | None:
    """A known visibility, or ``None`` for unstamped or unknown origins (treated alike)."""
    try:
        return None if value is None else Visibility(value.strip().lower())
    except ValueError:
        return None


class Audience(enum.Enum):
    """Who may see a scope's records."""

    PERSON = "person"
    ORIGIN = "origin"
    EVERYONE = "everyone"


#: The kinds whose scopes have a narrower audience than the installation: a user scope is
#: the one person it names, a channel scope the people of that one conversation. Every
#: other kind (org, repo, a plugin's) is everyone's here. The write policy narrows an org
#: write from a closed origin to one of these; the read gate opens one only to its audience.
AUDIENCE_KINDS: Mapping[Audience, str] = {Audience.PERSON: "user", Audience.ORIGIN: "channel"}


def audience_of(scope_key: str) -> Audience:
    """The audience of ``scope_key``, by its kind."""
    kind = scope_kind(scope_key)
    for audience, narrow in AUDIENCE_KINDS.items():
        if kind == narrow:
            return audience
    return Audience.EVERYONE


@attrs.frozen
class RunActor:
    """The principal a run writes as: its own scopes by kind (``{"user": "user:slack:U1",
    "channel": …}``) — the only scopes any of its writes may land in."""

    scopes: Mapping[str, str]

    @property
    def scope_keys(self) -> frozenset[str]:
        return frozenset(self.scopes.values())

    def scope(self, kind: str) -> str | None:
        return self.scopes.get(kind)


@attrs.frozen
class WriteDecision:
    """A policy's answer. ``scope_key`` is where the write goes (``None``: denied);
    ``reason`` is a short token for the log when the write was narrowed or denied."""

    scope_key: str | None
    reason: str | None = None

    @classmethod
    def allow(cls, target: str) -> WriteDecision:
        return cls(target)

    @classmethod
    def narrow(cls, to: str, reason: str) -> WriteDecision:
        return cls(to, reason)

    @classmethod
    def deny(cls, reason: str) -> WriteDecision:
        return cls(None, reason)

    @property
    def allowed(self) -> bool:
        return self.scope_key is not None


WIDENING_REFUSED = "policy_widened"


def settle_decision(
    target: str,
    decision: WriteDecision | None,
    actor: RunActor,
    breadth: Mapping[str, int],
) -> WriteDecision:
    """The decision the host acts on. No answer allows the routed target; an answer that
    moves the write to a scope the run does not have, to a wider (or equally wide but
    different) scope, or to a scope of a wider audience (a person's or a channel's write
    into a plugin kind's, which is everyone's whatever its breadth), is refused as a
    denial."""
    if decision is None:
        return WriteDecision.allow(target)
    if not isinstance(decision, WriteDecision):
        return WriteDecision.deny(WIDENING_REFUSED)
    if decision.scope_key is None or decision.scope_key == target:
        return decision
    if decision.scope_key not in actor.scope_keys:
        return WriteDecision.deny(WIDENING_REFUSED)
    unknown = max(breadth.values(), default=0) + 1
    old = breadth.get(scope_kind(target), unknown)
    new = breadth.get(scope_kind(decision.scope_key), unknown)
    if new <= old or _WIDTH[audience_of(decision.scope_key)] > _WIDTH[audience_of(target)]:
        return WriteDecision.deny(WIDENING_REFUSED)
    return decision


#: How many people an audience reaches, narrowest first: a breadth a plugin kind claims
#: never makes an everyone's scope narrower than a person's or a channel's.
_WIDTH: Mapping[Audience, int] = {Audience.PERSON: 0, Audience.ORIGIN: 1,
                                  Audience.EVERYONE: 2}


def first_available(actor: RunActor, kinds: Sequence[str]) -> str | None:
    for kind in kinds:
        key = actor.scope(kind)
        if key is not None:
            return key
    return None
