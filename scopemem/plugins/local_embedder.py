"""The ``local`` embedder: a sentence-embedding model on disk, run by ONNX Runtime.

``[memory.embedders.local]``:

* ``directory`` (required): a folder holding ``model.onnx`` (a transformer exported to ONNX,
  int8-quantized or not) and ``tokenizer.json`` (its Hugging Face ``tokenizers`` file), as
  the ONNX exports of sentence-transformers models ship;
* ``max_length``: tokens kept of a text (default 256: what all-MiniLM-L6-v2 was trained on);
* ``threads``: ONNX Runtime's intra-op threads (default 1: one core per embedding, the rest
  left to the host).

A vector is the model's token outputs averaged over the text's tokens (mean pooling, what
sentence-transformers' MiniLM, mpnet and e5 models use), or the model's own 2-d output when it
pools itself. The model and tokenizer load on the first ``embed``, in a worker thread, and
every batch runs there too, so the event loop never waits on a forward pass. Needs the
``local-embeddings`` extra (``onnxruntime``, ``tokenizers``); no torch.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from typing import Any

from scopemem.errors import ConfigError
from scopemem.plugins.embedders import EmbedderSettings
from scopemem.plugins.providers import ProviderError

__all__ = ["LocalEmbedder"]

OPTIONS = ("directory", "max_length", "threads")
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
DEFAULT_MAX_LENGTH = 256
# Texts per forward pass: enough to amortise the call, small enough that padding to the
# batch's longest text stays cheap.
BATCH = 16


class LocalEmbedder:
    """One ONNX model and its tokenizer, loaded once, used from one thread at a time."""

    def __init__(self, *, name: str, directory: str, max_length: int = DEFAULT_MAX_LENGTH,
                 threads: int = 1) -> None:
        self.name = name
        self.directory = directory
        self.max_length = max_length
        self.threads = threads
        self._loaded: tuple[Any, Any, tuple[str, ...]] | None = None
        self._lock = threading.Lock()  # one forward pass at a time: the session is not ours

    @classmethod
    def from_settings(cls, settings: EmbedderSettings) -> LocalEmbedder:
        settings.unknown_options(OPTIONS)
        if "directory" not in settings.options:
            raise ConfigError(f"{settings.option_key('directory')}: required: the folder "
                              f"holding {MODEL_FILE} and {TOKENIZER_FILE}")
        directory = os.path.expanduser(settings.string_option("directory", ""))
        return cls(name=settings.name or "local", directory=directory,
                   max_length=settings.int_option("max_length", DEFAULT_MAX_LENGTH, 8, 8192),
                   threads=settings.int_option("threads", 1, 1, 256))

    async def embed(self, *, model: str, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await asyncio.to_thread(self._embed, list(texts))

    async def close(self) -> None:
        self._loaded = None

    def _load(self) -> tuple[Any, Any, tuple[str, ...]]:
        try:
            import onnxruntime
            import tokenizers
        except ImportError:
            raise ProviderError(f"{self.name}: the local embedder needs the local-embeddings "
                                "extra (pip install -e '.[local-embeddings]')") from None
        model_path = os.path.join(self.directory, MODEL_FILE)
        tokenizer_path = os.path.join(self.directory, TOKENIZER_FILE)
        for path in (model_path, tokenizer_path):
            if not os.path.isfile(path):
                raise ProviderError(f"{self.name}: {path} is not a file "
                                    f"(memory.embedders.{self.name}.directory)")
        try:
            tokenizer = tokenizers.Tokenizer.from_file(tokenizer_path)
            tokenizer.enable_truncation(self.max_length)
            tokenizer.enable_padding()
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            # Only what is fatal: a failed batch is this embedder's one ProviderError (with
            # ONNX Runtime's reason), not a line of its own on stderr as well.
            options.log_severity_level = 4
            session = onnxruntime.InferenceSession(model_path, options,
                                                   providers=["CPUExecutionProvider"])
        except Exception as exc:  # a corrupt file: a provider failure, said once
            raise ProviderError(f"{self.name}: cannot load the model in {self.directory}: "
                                f"{type(exc).__name__}") from None
        inputs = tuple(item.name for item in session.get_inputs())
        return tokenizer, session, inputs

    def _failed(self, shape: tuple[int, ...], exc: Exception) -> str:
        """A failed batch's message: its size, ONNX Runtime's reason (on one line, its last
        300 characters), and the usual cause: texts of more tokens than the model has
        positions."""
        reason = " ".join(str(exc).split())[-300:].lstrip() or type(exc).__name__
        return (f"{self.name}: the model failed on {shape[0]} texts of up to {shape[1]} "
                f"tokens: {reason} (a model that takes fewer tokens needs a lower "
                f"memory.embedders.{self.name}.max_length ({self.max_length}))")

    def _embed(self, texts: list[str]) -> list[list[float]]:
        import numpy as np

        with self._lock:
            if self._loaded is None:
                self._loaded = self._load()
            tokenizer, session, inputs = self._loaded
            vectors: list[list[float]] = []
            for start in range(0, len(texts), BATCH):
                encodings = tokenizer.encode_batch(texts[start:start + BATCH])
                feeds = {
                    "input_ids": np.array([item.ids for item in encodings], dtype=np.int64),
                    "attention_mask": np.array([item.attention_mask for item in encodings],
                                               dtype=np.int64),
                    "token_type_ids": np.array([item.type_ids for item in encodings],
                                               dtype=np.int64),
                }
                try:
                    output = session.run(None, {name: feeds[name] for name in inputs
                                                if name in feeds})[0]
                except Exception as exc:
                    # The texts' failure (most often more tokens than the model has
                    # positions): the lane splits the batch; the others get their vectors.
                    raise ProviderError(self._failed(feeds["input_ids"].shape, exc),
                                        refused_input=True) from None
                if output.ndim == 3:  # token outputs: the mean over the text's tokens
                    mask = feeds["attention_mask"][:, :, None].astype(np.float32)
                    output = (output * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
                vectors.extend(row.tolist() for row in np.asarray(output, dtype=np.float32))
            return vectors
