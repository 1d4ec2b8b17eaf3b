"""Embedding providers: what the optional semantic lane turns text into vectors with.

``memory.embeddings = "<provider>/<model>"`` names a provider registered through the
``scopemem_register_embedders`` hook and a model it serves. The provider part selects a
factory; the factory receives an ``EmbedderSettings`` (its own ``[memory.embedders.<name>]``
table plus the environment) and returns an ``Embedder``.

An embedder does one thing: turn a batch of texts into one vector each, in order. It turns
every failure into a ``ProviderError`` whose message is safe to log (never a key), with
``refused_input=True`` when the texts themselves failed (a text longer than the model
takes): the host then splits the batch so the others get their vectors. The host
(``scopemem.api.semantic``) checks what comes back (one finite vector per text, every vector
of one dimension) and normalizes it; an embedder need not.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

import attrs

from scopemem.options import OptionsTable
from scopemem.plugins.providers import ModelRef, ProviderError
from scopemem.plugins.registry import Registry

if TYPE_CHECKING:
    import pluggy

    from scopemem.config import MemoryConfig

__all__ = ["Embedder", "EmbedderFactory", "EmbedderSettings", "build_embedder",
           "embedder_registry"]


@runtime_checkable
class Embedder(Protocol):
    """One embedding endpoint or local model."""

    async def embed(self, *, model: str, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        """One vector per text, in order. Any failure raises ``ProviderError``
        (``refused_input=True`` when it is the texts')."""

    async def close(self) -> None:
        """Release connections or sessions. Idempotent; safe before any call."""


@attrs.frozen(kw_only=True)
class EmbedderSettings(OptionsTable):
    """What an embedder factory is built from: the embedder's registered name, its own
    options table (``[memory.embedders.<name>]``) and the environment."""

    TABLE: ClassVar[str] = "embedders"


EmbedderFactory = Callable[[EmbedderSettings], Embedder]


def embedder_registry(pm: pluggy.PluginManager) -> Registry[EmbedderFactory]:
    """Every embedding provider the loaded plugins register, by name."""
    registry: Registry[EmbedderFactory] = Registry("embedder", ProviderError)
    registry.fill(pm.hook.scopemem_register_embedders)
    return registry


def build_embedder(pm: pluggy.PluginManager, config: MemoryConfig, ref: ModelRef,
                   environ: Mapping[str, str] | None = None) -> Embedder:
    """The embedder ``ref`` names, built from its ``[memory.embedders.<name>]`` table.
    ``ProviderError`` when none is registered under that name (listing the installed ones)
    or the factory returns something else; ``ConfigError`` (from the factory) naming the
    key when the table is wrong. No I/O."""
    factory = embedder_registry(pm).get(ref.provider)
    settings = EmbedderSettings(name=ref.provider,
                                options=dict(config.embedder_options(ref.provider)),
                                environ=dict(os.environ if environ is None else environ))
    return check_embedder(ref.provider, factory(settings))


def check_embedder(name: str, embedder: object) -> Embedder:
    """``embedder`` when it is one (``embed`` and ``close``); else ``ProviderError`` naming
    the embedder ``name``, when it is built and when its table is checked."""
    if not isinstance(embedder, Embedder):
        raise ProviderError(f"embedder {name!r}: the factory returned "
                            f"{type(embedder).__name__}, which does not implement embed() "
                            "and close()")
    return embedder
