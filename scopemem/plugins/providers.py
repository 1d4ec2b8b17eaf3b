"""Model providers: what reflection calls to distill a finished run.

``memory.model = "<provider>/<model>"`` names a provider registered through the
``scopemem_register_providers`` hook and a model that provider serves. The provider part
selects a factory; the factory receives a ``ProviderSettings`` (its own
``[memory.providers.<name>]`` table plus the environment) and returns a ``Provider``.

A provider does exactly one thing: send one system prompt and one user message to a model
and hand back the assistant's text. It never offers tools, and turns every failure into a
``ProviderError`` whose message is safe to log (it never carries a key). The built-in
providers retry a transient failure within their timeout (``stores.retrying``); reflection
itself calls once, and decides what a failure means (one warning, nothing written).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

import attrs

from scopemem.errors import ScopememError
from scopemem.options import OptionsTable
from scopemem.plugins.registry import Registry

if TYPE_CHECKING:
    import pluggy

    from scopemem.config import MemoryConfig

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "ModelRef",
    "Provider",
    "ProviderError",
    "ProviderFactory",
    "ProviderSettings",
    "build_provider",
    "check_provider",
    "parse_model_ref",
    "provider_registry",
]

# Reflection asks for at most this many output tokens (seed 000, item 12).
DEFAULT_MAX_TOKENS = 1024


class ProviderError(ScopememError):
    """A model call failed (transport, timeout, refused status, unusable reply), or the
    provider asked for is not installed. The message never contains an API key.

    ``refused_input``: the call failed for what it was given, not for the provider: an
    embedder sets it when its server refused the texts (HTTP 400, 413, 422: a text longer
    than the model takes), the semantic lane when a vector is unusable for its text (zero,
    not finite). The lane then splits the batch so the other texts get their vectors; any
    other failure (a server down, a key refused, a timeout) stops the embedding at one call
    a batch."""

    def __init__(self, message: str = "", *, refused_input: bool = False) -> None:
        super().__init__(message)
        self.refused_input = refused_input


@attrs.frozen
class ModelRef:
    """A ``<provider>/<model>`` reference, split at its first slash."""

    provider: str
    model: str

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}"


def parse_model_ref(ref: str) -> ModelRef:
    """Split ``"<provider>/<model>"`` at the first ``/``.

    The model part may itself contain slashes (``"openai/meta-llama/Llama-3"`` is provider
    ``openai``, model ``meta-llama/Llama-3``). Both parts must be non-empty and the whole
    reference may not contain whitespace; anything else is a ``ValueError`` saying why.
    """
    if not isinstance(ref, str):
        raise ValueError(f"a model reference must be a string, got {type(ref).__name__}")
    if not ref:
        raise ValueError("a model reference must not be empty (expected <provider>/<model>)")
    if any(char.isspace() for char in ref):
        raise ValueError(f"model reference {ref!r} contains whitespace "
                         "(expected <provider>/<model>)")
    provider, slash, model = ref.partition("/")
    if not slash:
        raise ValueError(f"model reference {ref!r} has no '/' (expected <provider>/<model>)")
    if not provider:
        raise ValueError(f"model reference {ref!r} names no provider before the '/'")
    if not model:
        raise ValueError(f"model reference {ref!r} names no model after the '/'")
    return ModelRef(provider=provider, model=model)


@runtime_checkable
class Provider(Protocol):
    """One model endpoint, as reflection uses it."""

    async def complete(
        self, *, model: str, system: str, user: str, max_tokens: int = DEFAULT_MAX_TOKENS
    ) -> str:
        """Send one system prompt and one user message to ``model``; return the reply text.

        One completion, no tools; what another attempt may fix (a dropped connection, a
        busy answer) may be retried within the call's timeout, as the built-in providers
        do. Any failure (transport error, timeout, non-2xx status, a body without the
        expected text) raises ``ProviderError``; a status error names the status and a
        short, key-free excerpt of the server's reason.
        """

    async def close(self) -> None:
        """Release the provider's connections. Idempotent; safe before any call."""


@attrs.frozen(kw_only=True)
class ProviderSettings(OptionsTable):
    """What a provider factory is built from: the provider's registered name, its own
    options table (``[memory.providers.<name>]``, validated by the factory with the
    ``OptionsTable`` helpers), and the environment (where API keys named by the options are
    looked up)."""

    TABLE: ClassVar[str] = "providers"


ProviderFactory = Callable[[ProviderSettings], Provider]


def provider_registry(pm: pluggy.PluginManager) -> Registry[ProviderFactory]:
    """Every provider the loaded plugins register, by name."""
    registry: Registry[ProviderFactory] = Registry("provider", ProviderError)
    registry.fill(pm.hook.scopemem_register_providers)
    return registry


def build_provider(
    pm: pluggy.PluginManager,
    config: MemoryConfig,
    ref: ModelRef,
    environ: Mapping[str, str] | None = None,
) -> Provider:
    """The provider ``ref`` names, built from its ``[memory.providers.<name>]`` table.

    Raises ``ProviderError`` when no plugin registers that provider (the message lists the
    installed ones) or when the factory returns something that is not a provider, and
    ``ConfigError`` (from the factory) when the options table is wrong. Building does no
    I/O; the first ``complete`` opens the connection.
    """
    factory = provider_registry(pm).get(ref.provider)
    settings = ProviderSettings(
        name=ref.provider,
        options=dict(config.provider_options(ref.provider)),
        environ=dict(os.environ if environ is None else environ),
    )
    return check_provider(ref.provider, factory(settings))


def check_provider(name: str, provider: object) -> Provider:
    """``provider`` when it is one (``complete`` and ``close``); else ``ProviderError``
    naming the provider ``name``, when it is built and when its table is checked."""
    if not isinstance(provider, Provider):
        raise ProviderError(
            f"provider {name!r}: the factory returned {type(provider).__name__}, "
            "which does not implement complete() and close()"
        )
    return provider
