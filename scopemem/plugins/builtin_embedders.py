"""The built-in embedding providers of the semantic lane.

* ``openai``: an OpenAI-compatible ``POST {base_url}/embeddings`` client (OpenAI, Ollama,
  vLLM and most gateways speak it), over the reflection providers' aiohttp client: the same
  options (``base_url``, ``api_key_env``, ``timeout_seconds``) under
  ``[memory.embedders.openai]``, the same retries (a dropped connection, 429 and 503 with
  ``Retry-After``, within the timeout) and the same key-free errors.
* ``local``: an ONNX model on disk (``scopemem.plugins.local_embedder``), run by ONNX
  Runtime with the ``tokenizers`` library (the ``local-embeddings`` extra; no torch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from scopemem.plugins.builtin_providers import OpenAIProvider
from scopemem.plugins.embedders import Embedder, EmbedderSettings
from scopemem.plugins.markers import hookimpl
from scopemem.plugins.providers import ProviderError

__all__ = ["OpenAIEmbedder", "scopemem_register_embedders"]


@hookimpl
def scopemem_register_embedders(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register("openai", OpenAIEmbedder.from_settings)
    register("local", _local)


def _local(settings: EmbedderSettings) -> Embedder:
    # onnxruntime and tokenizers load on the first embed, never with the plugin list.
    from scopemem.plugins.local_embedder import LocalEmbedder

    return LocalEmbedder.from_settings(settings)


class OpenAIEmbedder(OpenAIProvider):
    """``POST {base_url}/embeddings`` with ``{"model", "input": [texts]}``; the reply's
    ``data[i].embedding`` (ordered by ``data[i].index``) is text i's vector."""

    table = "embedders"

    def _url(self) -> str:
        return f"{self.base_url}/embeddings"

    async def embed(self, *, model: str, texts: Sequence[str]) -> list[list[float]]:
        if self._closed:
            raise ProviderError(f"{self.name}: the embedder is closed")
        if not texts:
            return []
        reply = await self._call({"model": model, "input": list(texts)})
        data = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(data, list) or len(data) != len(texts):
            raise self._malformed(f"expected {len(texts)} embeddings in data")
        vectors: list[list[float] | None] = [None] * len(texts)
        for position, item in enumerate(data):
            index = item.get("index", position) if isinstance(item, dict) else None
            vector = item.get("embedding") if isinstance(item, dict) else None
            if (isinstance(index, bool) or not isinstance(index, int)
                    or not 0 <= index < len(texts) or vectors[index] is not None):
                raise self._malformed(f"data[{position}].index is not a new text's place")
            if not isinstance(vector, list) or not all(
                    isinstance(value, int | float) and not isinstance(value, bool)
                    for value in vector):
                raise self._malformed(f"data[{position}].embedding is not a list of numbers")
            vectors[index] = vector
        return [vector for vector in vectors if vector is not None]
