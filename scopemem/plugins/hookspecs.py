"""Every hook scopemem calls. Hook names, argument names and return types are public API.

Plugins implement hooks with ``scopemem.hookimpl`` and are found through the ``scopemem``
entry-point group. The built-in behaviour (the four scope kinds, the status gate, the
narrowing write policy, the stores) is registered through these same hooks, so a third-party
plugin is a peer of the built-ins: it can add to them, and where a hook merges by name, replace
them.

Conventions:

* A plugin returns a value or ``None`` (abstains). Combining answers (merging scope kinds,
  concatenating markers, settling a policy's answer) is done by the host with pure functions
  in ``scopemem.core``, never by one plugin looking at another's answer.
* Hooks whose answers are collected are called most recently registered plugin first
  (pluggy's order); built-ins are registered before entry points.
* Only ``scopemem_authorize_write`` is ``firstresult``: one write gets one decision.
* Hooks are synchronous; they decide, they do not do I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from scopemem.plugins.markers import hookspec

if TYPE_CHECKING:
    import click

    from scopemem.config import MemoryConfig
    from scopemem.core.policy import RunActor, WriteDecision
    from scopemem.core.records import Candidate
    from scopemem.core.requests import ScopeKind


@hookspec
def scopemem_register_stores(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register store factories by name.

    :param register: ``register(name, factory)``; ``factory(settings: StoreSettings)`` returns
        a ``MemoryStore``. ``settings.options`` is the ``[memory.stores.<name>]`` table, which
        the factory validates itself (raise ``ConfigError`` naming the key), with the
        ``OptionsTable`` helpers so ``config check`` can print the options in effect. A
        factory does no I/O (files and connections open on first use): it is also called
        with ``settings.validate_only`` set, only to validate its table, and its result is
        then dropped unused; it should not warn about the environment then. With
        ``settings.allow_fallback`` false (a one-shot command) it must not stand in with a
        store that dies with the process.

    Called once when ``Memory`` (or a command) builds its store registry. A name registered
    twice is an error. ``memory.store = "<name>"`` selects one; an unknown name's error lists
    the installed stores.
    """


@hookspec
def scopemem_scope_kinds(config: MemoryConfig) -> Sequence[ScopeKind] | None:
    """Return the kinds of scope this plugin derives.

    :param config: the loaded configuration (the org deriver reads ``organization``).
    :return: ``ScopeKind(name, breadth, derive)`` objects, or ``None``. ``derive(request)``
        returns the scope key (which must start with ``"<name>:"``) or ``None`` when the
        request does not carry the input; it sees the repo already resolved.

    Called once per ``Memory``. Answers are merged by name, the most recently registered
    plugin winning, so a chat adapter can add a kind (``guild``) or replace a built-in
    deriver. Breadth orders scopes widest first (built-ins: org 0, repo 10, channel 20,
    user 30) and tells the host which policy answers would widen a write. Every kind is a
    scope everywhere a built-in one is: read for a request that carries its input, an
    audience reflection may route a fact to (``description`` completes the extractor's
    instruction for it), and a scope word of ``memory list|forget|sweep|remember``
    (derived from ``Request.extra``, ``--extra KEY=VALUE`` on the command line). A kind's
    scopes are shared: changing their records needs an admin.
    """


@hookspec
def scopemem_rejection_markers(candidate: Candidate) -> Sequence[str] | None:
    """Return the names of the status markers this plugin finds in a candidate.

    :param candidate: a fact about to be written (summaries are never asked about).
    :return: marker names (1-64 ASCII letters, digits, ``_``, ``.`` or ``-``: each names
        the counter ``rejected:<marker>``; any other is a ``PluginError``), or
        ``None``/empty to pass it.

    Called for every fact before it is written, whoever offers it (reflection, a person's
    ``remember``), after redaction and the record caps. Answers are concatenated and any
    marker rejects the fact; a person told of a refusal by a marker that is not the built-in
    gate's hears that a plugin refused it, by its marker names. The built-in gate returns
    the status and change-description markers of ``scopemem.core.gate`` (``memory.gate =
    false`` leaves it out; other plugins still answer). Summaries are episodic: no plugin is
    asked about them. Stores' ``sweep`` applies the built-in gate only (stores do not call
    plugins).
    """


@hookspec(firstresult=True)
def scopemem_authorize_write(
    actor: RunActor, target: str, candidate: Candidate, origin: str | None
) -> WriteDecision | None:
    """Decide one routed write: allow, narrow, or deny.

    :param actor: the run's own scopes by kind; the only scopes a write may land in.
    :param target: the scope key reflection routed the candidate to.
    :param candidate: what would be written.
    :param origin: the run's channel visibility (``public``, ``private``, ``dm``,
        ``machine``), or ``None`` when unstamped.
    :return: a ``WriteDecision`` (``allow(target)``, ``narrow(to, reason)``,
        ``deny(reason)``; a reason is a token shaped as a marker name, else a
        ``PluginError``), or ``None`` to abstain (the next plugin decides; if all abstain
        the write is allowed).

    Called by reflection once per routed write, after the gate. First answer wins; the
    built-in narrowing policy is registered ``trylast``, and its narrowing by origin is then
    applied to whatever scope a plugin's answer chose (a DM's write never lands in a scope
    everyone reads while the built-in is registered). The host refuses an answer that
    would widen the audience or reach a scope the run lacks, and treats it as a denial
    (``policy_widened``). Reads never consult this hook.
    """


@hookspec
def scopemem_register_providers(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register model providers for reflection by name.

    :param register: ``register(name, factory)``; ``memory.model = "<name>/<model>"`` picks
        a provider and a model. ``factory(settings: ProviderSettings)`` returns a
        ``Provider`` (``scopemem.plugins.providers``); ``settings.options`` is the
        ``[memory.providers.<name>]`` table, which the factory validates itself (raise
        ``ConfigError`` naming the key). Factories do no I/O.

    Called once when a provider is first needed. A name registered twice is an error.
    """


@hookspec
def scopemem_register_embedders(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register embedding providers for the semantic lane by name.

    :param register: ``register(name, factory)``; ``memory.embeddings = "<name>/<model>"``
        picks an embedder and a model. ``factory(settings: EmbedderSettings)`` returns an
        ``Embedder`` (``scopemem.plugins.embedders``); ``settings.options`` is the
        ``[memory.embedders.<name>]`` table, which the factory validates itself (raise
        ``ConfigError`` naming the key). Factories do no I/O (a local model loads on its
        first ``embed``). ``embed`` raises ``ProviderError(..., refused_input=True)`` when
        the texts themselves failed (a text longer than the model takes): the lane splits
        the batch so the others get their vectors. Any other ``ProviderError`` stops the
        embedding at one call a batch.

    Called once when ``Memory`` is built with ``memory.embeddings`` set (and by ``config
    check``). A name registered twice is an error. The built-ins (``openai``, an
    OpenAI-compatible ``/embeddings`` client, and ``local``, an ONNX model on disk) arrive
    this way too.
    """


@hookspec
def scopemem_register_commands(cli: click.Group) -> None:
    """Add click commands to the ``scopemem`` command line.

    :param cli: the root group; call ``cli.command()``/``cli.add_command`` on it.

    Called once when the command line starts. Built-in commands arrive this way too.
    """
