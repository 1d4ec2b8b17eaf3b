"""What a run brings to memory, and how scope keys are derived from it.

Scopes are derived, never configured: a request yields the org scope always and a user,
channel or repo scope only when it carries that input. Deriving a scope whose input is
missing is refused, so there is never a shared anonymous bucket.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import attrs

from scopemem.core.scopes import order_scope_keys, scope_key_problem


class ScopeRefused(ValueError):
    """A scope was asked for but the request does not carry what it is derived from."""


def _optional_str(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be a string or None, got {type(value).__name__}")


@attrs.frozen(kw_only=True)
class Request:
    """One run's identity, as a chat or repository adapter knows it.

    Ids are already platform-namespaced by the adapter (``slack:U0123``). ``repo`` may be an
    ``owner/name`` string, ``None``, or an awaitable resolving to either, because the repo
    is often still being resolved when memory starts reading. ``channel_visibility`` is the
    origin's audience (``public``, ``private``, ``dm``, ``machine``); ``None`` is unstamped.
    ``extra`` carries adapter-specific inputs for third-party scope kinds (a guild id, say).
    ``no_memory`` keeps the run out of memory: it is read as usual but never reflected, so
    nothing of it is written. ``run_id`` and ``thread_key`` name the run a block is for: the
    records it shows are logged as having reached it (``core.browse.Reach``).
    """

    text: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    user_id: str | None = attrs.field(default=None, validator=_optional_str)
    channel_id: str | None = attrs.field(default=None, validator=_optional_str)
    repo: str | Awaitable[str | None] | None = None
    channel_visibility: str | None = attrs.field(default=None, validator=_optional_str)
    extra: Mapping[str, str] = attrs.field(factory=dict)
    no_memory: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    run_id: str | None = attrs.field(default=None, validator=_optional_str)
    thread_key: str | None = attrs.field(default=None, validator=_optional_str)


Deriver = Callable[[Request], "str | None"]


@attrs.frozen
class ScopeKind:
    """A kind of scope: its name (the key's prefix), its breadth (lower is wider: org 0,
    repo 10, channel 20, user 30) and a deriver that returns the key for a request, or
    ``None`` when the request does not carry the input. ``derive`` sees a request whose
    ``repo`` is already resolved to a string or ``None``.

    Every kind is an audience reflection may route a fact to; ``description`` completes the
    extractor's instruction for it ("when it is about this Discord server"), else a generic
    one is used."""

    name: str
    breadth: int
    derive: Deriver
    description: str | None = None


def merge_scope_kinds(answers: Iterable[Iterable[ScopeKind] | None]) -> dict[str, ScopeKind]:
    """Combine every plugin's kinds by name. Answers come most recently registered plugin
    first, so a plugin registered after the built-ins replaces a built-in of the same name."""
    merged: dict[str, ScopeKind] = {}
    for answer in answers:
        for kind in answer or ():
            merged.setdefault(kind.name, kind)
    return merged


def breadth_of(kinds: Mapping[str, ScopeKind]) -> dict[str, int]:
    return {name: kind.breadth for name, kind in kinds.items()}


def _checked(kind: ScopeKind, key: str | None) -> str | None:
    if key is None:
        return None
    problem = scope_key_problem(key)
    if problem is not None:
        raise ScopeRefused(f"the {kind.name} scope key {problem}")
    if not key.startswith(f"{kind.name}:"):
        raise ScopeRefused(f"the {kind.name} deriver returned a key of another kind")
    return key


def derive_scope_key(kinds: Mapping[str, ScopeKind], name: str, request: Request) -> str:
    """The key of one named scope for this request; refused when its input is missing."""
    kind = kinds.get(name)
    if kind is None:
        raise ScopeRefused(f"unknown scope kind {name!r}; known: {', '.join(sorted(kinds))}")
    key = _checked(kind, kind.derive(request))
    if key is None:
        raise ScopeRefused(f"this request has no {name} scope")
    return key


def request_scope_keys(
    kinds: Mapping[str, ScopeKind], request: Request
) -> tuple[list[str], list[str]]:
    """Every scope key the request carries, widest first, and the refusals (one message per
    kind whose deriver returned something unusable). A missing input is simply no scope."""
    keys: list[str] = []
    refusals: list[str] = []
    for kind in kinds.values():
        try:
            key = _checked(kind, kind.derive(request))
        except ScopeRefused as exc:
            refusals.append(str(exc))
            continue
        if key is not None:
            keys.append(key)
    return order_scope_keys(keys, breadth_of(kinds)), refusals


def resolved(request: Request, repo: str | None) -> Request:
    return attrs.evolve(request, repo=repo)

