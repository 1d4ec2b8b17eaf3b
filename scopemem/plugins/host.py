"""The host side of the hooks: call them, then combine the answers with ``scopemem.core``.

``screen_candidate`` is the one path every producer's candidate takes before a store sees
it (reflection's facts and summary, a person's ``remember``): redaction and the record
contract's caps (``scopemem.secrets``, ``scopemem.core.hygiene``), the salience rule
(noise is refused with the marker ``noise``), then the status gate. Nothing reaches a store
by a side door.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import attrs

from scopemem.config import MemoryConfig
from scopemem.core.commands import ALL, ME
from scopemem.core.counters import MARKER_NAME_RULE, is_marker_name
from scopemem.core.hygiene import NOISE, fit_candidate, noise_reason, without_nul
from scopemem.core.policy import RunActor, WriteDecision, settle_decision
from scopemem.core.records import Candidate, Kind
from scopemem.core.requests import Request, ScopeKind, ScopeRefused, merge_scope_kinds
from scopemem.core.text import is_text
from scopemem.errors import PluginError
from scopemem.plugins.calling import hook_answers
from scopemem.plugins.manager import PluginManager
from scopemem.stores.base import redact_provenance

BUILTIN_GATE = "scopemem.plugins.builtin_gate"
BUILTIN_POLICY = "scopemem.plugins.builtin_policy"
#: What a scope kind's name may be: the first segment of its keys, and a scope word.
KIND_NAME = re.compile(r"[a-z][a-z0-9_-]*")


def scope_kinds(pm: PluginManager, config: MemoryConfig) -> dict[str, ScopeKind]:
    """Every plugin's kinds, merged. An answer that is not a list of ``ScopeKind`` is a
    ``PluginError`` naming the plugin; a deriver that raises costs its scope, as one that
    returns an unusable key does (``ScopeRefused`` naming the kind and the plugin)."""
    answers: list[list[ScopeKind]] = []
    for plugin, answer in hook_answers(pm.hook.scopemem_scope_kinds, config=config):
        if not isinstance(answer, Sequence) or isinstance(answer, str) or not all(
                isinstance(kind, ScopeKind) for kind in answer):
            raise PluginError(f"plugin {plugin!r} answered scopemem_scope_kinds with "
                              f"{_shown(answer)}, not a list of ScopeKind")
        for kind in answer:
            problem = _kind_problem(kind)
            if problem is not None:
                raise PluginError(f"plugin {plugin!r} answered scopemem_scope_kinds with the "
                                  f"kind {kind.name!r}, whose {problem}")
        answers.append([_guarded(kind, plugin) for kind in answer])
    return merge_scope_kinds(answers)


def _kind_problem(kind: ScopeKind) -> str | None:
    """Why a kind cannot be used (``None``: it can). Its name is a scope key's first segment
    and a scope word of the commands, beside ``me`` and ``all``."""
    if not isinstance(kind.name, str) or not KIND_NAME.fullmatch(kind.name):
        return "name is not a lowercase word (a-z, 0-9, _ and -, a letter first)"
    if kind.name in (ME, ALL):
        return f"name is the scope word {kind.name!r} of the commands"
    if not isinstance(kind.breadth, int) or isinstance(kind.breadth, bool):
        return "breadth is not an integer"
    if not callable(kind.derive):
        return "derive is not callable"
    if kind.description is not None and not isinstance(kind.description, str):
        return "description is not a string"
    return None


def _guarded(kind: ScopeKind, plugin: str) -> ScopeKind:
    derive = kind.derive

    def guarded(request: Request) -> str | None:
        try:
            key = derive(request)
        except ScopeRefused:
            raise
        except Exception as exc:
            raise ScopeRefused(f"the {kind.name} deriver of plugin {plugin!r} failed: "
                               f"{type(exc).__name__}: {exc}") from exc
        if isinstance(key, str) and not is_text(key):  # no store can keep it, no log show it
            raise ScopeRefused(f"the {kind.name} scope key is not valid Unicode text (it "
                               "holds a lone surrogate)")
        return key

    return attrs.evolve(kind, derive=guarded)


def _shown(answer: object) -> str:
    text = repr(answer)
    return f"{text[:80]}… ({type(answer).__name__})" if len(text) > 80 else text


def rejection_markers(pm: PluginManager, candidate: Candidate, *, gate: bool = True
                      ) -> list[str]:
    """Every plugin's markers for ``candidate``. ``gate=False`` (``memory.gate = false``)
    leaves the built-in status gate out; other plugins' markers still apply."""
    # The gate's and the secret rules load on the first write, not with a read.
    from scopemem.core.gate import combine_markers

    hook = pm.hook.scopemem_rejection_markers
    if not gate:
        builtin = pm.get_plugin(BUILTIN_GATE)
        if builtin is not None:
            hook = pm.subset_hook_caller("scopemem_rejection_markers", [builtin])
    answers = hook_answers(hook, candidate=candidate)
    for plugin, answer in answers:
        if not isinstance(answer, Sequence) or isinstance(answer, str) or not all(
                isinstance(marker, str) for marker in answer):
            raise PluginError(f"plugin {plugin!r} answered scopemem_rejection_markers with "
                              f"{_shown(answer)}, not a list of marker names")
        for marker in answer:
            if not is_marker_name(marker):
                raise PluginError(f"plugin {plugin!r} answered scopemem_rejection_markers with "
                                  f"the marker {_shown(marker)}, not {MARKER_NAME_RULE}")
    return combine_markers([answer for _plugin, answer in answers])


@attrs.frozen
class Screened:
    """A candidate as it may be written (redacted, then fitted to the record contract), the
    markers that refuse it (empty: it may be written), and what the screening changed:
    ``redacted`` (a secret was replaced), ``cut`` (the text was longer than a record holds
    and was cut to fit)."""

    candidate: Candidate
    markers: tuple[str, ...] = ()
    redacted: bool = False
    cut: bool = False

    @property
    def rejected(self) -> bool:
        return bool(self.markers)


def screen_candidate(pm: PluginManager, config: MemoryConfig, candidate: Candidate
                     ) -> Screened:
    """Make ``candidate`` safe to write and decide whether it may be: secrets redacted (its
    text, keywords and provenance), the record contract's caps applied, then the salience
    rule (noise, of any kind, is refused with the single marker ``NOISE``) and, for a fact,
    the status gate (``memory.gate``) and every plugin's markers. A summary is episodic by
    design and never gated (003)."""
    from scopemem.secrets import redact_candidate

    candidate = without_nul(candidate)  # redaction sees the text as it will be stored
    redacted = redact_candidate(candidate)
    cleaned = fit_candidate(redact_provenance(redacted))
    if noise_reason(cleaned.text) is not None:
        markers: tuple[str, ...] = (NOISE,)
    elif cleaned.kind == Kind.FACT:
        markers = tuple(rejection_markers(pm, cleaned, gate=config.gate))
    else:
        markers = ()
    return Screened(cleaned, markers, redacted=redacted.text != candidate.text,
                    cut=len(cleaned.text) < len(redacted.text))


def describe_markers(markers: tuple[str, ...] | list[str]) -> str:
    """Why a fact was refused, in words that claim no more than the markers say: the
    built-in gate's markers mean one-moment status or change narration; a plugin's mean
    only that the plugin refused it."""
    from scopemem.core.gate import MARKER_NAMES

    builtin = [marker for marker in markers if marker in MARKER_NAMES]
    other = [marker for marker in markers if marker not in MARKER_NAMES and marker != NOISE]
    reasons = []
    if NOISE in markers:
        reasons.append(f"it has nothing worth keeping ({NOISE})")
    if builtin:
        reasons.append("it reads as one-moment status or change narration, not a lesson "
                       f"({', '.join(builtin)})")
    if other:
        reasons.append(f"a write-gate plugin refused it ({', '.join(other)})")
    return "; ".join(reasons)


def authorize_write(
    pm: PluginManager,
    *,
    actor: RunActor,
    target: str,
    candidate: Candidate,
    origin: str | None,
    breadth: Mapping[str, int],
) -> WriteDecision:
    answers = hook_answers(pm.hook.scopemem_authorize_write, firstresult=True,
                           actor=actor, target=target, candidate=candidate, origin=origin)
    decision = answers[0][1] if answers else None
    if decision is not None and not isinstance(decision, WriteDecision):
        raise PluginError(f"plugin {answers[0][0]!r} answered scopemem_authorize_write with "
                          f"{_shown(decision)}, not a WriteDecision")
    if decision is not None and decision.scope_key is not None and not isinstance(
            decision.scope_key, str):
        raise PluginError(f"plugin {answers[0][0]!r} answered scopemem_authorize_write with "
                          f"the scope {_shown(decision.scope_key)}, not a scope key or None")
    if decision is not None and decision.reason is not None and not is_marker_name(
            decision.reason):
        raise PluginError(f"plugin {answers[0][0]!r} answered scopemem_authorize_write with "
                          f"the reason {_shown(decision.reason)}, not {MARKER_NAME_RULE}")
    settled = settle_decision(target, decision, actor, breadth)
    builtin = pm.get_plugin(BUILTIN_POLICY)
    by_builtin = bool(answers) and answers[0][0] == BUILTIN_POLICY
    if settled.scope_key is None or builtin is None or by_builtin:
        return settled
    # The built-in's narrowing by origin is a floor under every plugin's answer: a plugin
    # that allows (or narrows into) a scope everyone reads must not put what a DM or a
    # private channel said there. Disabling the built-in policy is how a team means it.
    floor = builtin.scopemem_authorize_write(actor=actor, target=settled.scope_key,
                                             candidate=candidate, origin=origin)
    if floor.scope_key == settled.scope_key:
        return settled
    return settle_decision(settled.scope_key, floor, actor, breadth)
