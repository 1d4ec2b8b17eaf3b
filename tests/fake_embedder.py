"""A deterministic embedder for tests: no network, no model.

Words of one concept group (``CONCEPTS``) share a dimension, so a paraphrase that shares no
word with a record still points its way; any other word of four or more letters takes a
dimension of its own by a stable hash. Registered as ``fake`` through the same hook as the
built-ins (``Plugin``), counting what it is asked."""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

from scopemem import hookimpl
from scopemem.plugins.providers import ProviderError

DIMENSIONS = 64
CONCEPTS = {
    **dict.fromkeys(("deploy", "deploys", "release", "rollout", "ship"), 1),
    **dict.fromkeys(("database", "postgres", "schema", "migration", "migrations"), 2),
    **dict.fromkeys(("cache", "redis", "caching"), 3),
}
_WORD = re.compile(r"[a-z]+")


def vector(text: str) -> list[float]:
    values = [0.0] * DIMENSIONS
    for word in _WORD.findall(text.lower()):
        if word in CONCEPTS:
            values[CONCEPTS[word]] += 1.0
        elif len(word) >= 4:
            values[8 + zlib.crc32(word.encode()) % (DIMENSIONS - 8)] += 1.0
    if not any(values):
        values[0] = 1.0
    return values


class FakeEmbedder:
    def __init__(self, fail_after: int | None = None) -> None:
        self.calls: list[list[str]] = []
        self.fail_after = fail_after

    async def embed(self, *, model: str, texts: Sequence[str]) -> list[list[float]]:
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise ProviderError("fake: down")
        self.calls.append(list(texts))
        return [vector(text) for text in texts]

    async def close(self) -> None:
        return None


class Plugin:
    """Registers ``embedder`` (one instance, so a test can look at its calls) as ``fake``."""

    def __init__(self, embedder: FakeEmbedder | None = None) -> None:
        self.embedder = embedder or FakeEmbedder()

    @hookimpl
    def scopemem_register_embedders(self, register):  # type: ignore[no-untyped-def]
        register("fake", lambda settings: self.embedder)
