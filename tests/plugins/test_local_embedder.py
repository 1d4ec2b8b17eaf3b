"""The ``local`` embedder's failures, with ONNX Runtime and ``tokenizers`` stood in for by
small fakes (``sys.modules``): the package's tests install neither, and what is checked is
what the embedder says, not what the model computes."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from scopemem.plugins.local_embedder import LocalEmbedder
from scopemem.plugins.providers import ProviderError

# What ONNX Runtime raises when a text has more tokens than the model has positions.
TOO_LONG = ("[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Add"
            " node. Name:'/bert/embeddings/Add_1' Status Message: Attempting to broadcast an"
            " axis by a dimension other than 1. 512 by 1024")


class _Encoding:
    """A word a token, padded to ``width``."""

    def __init__(self, text: str, width: int) -> None:
        words = len(text.split())
        self.ids = [1] * words + [0] * (width - words)
        self.attention_mask = [1] * words + [0] * (width - words)
        self.type_ids = [0] * width


class _Tokenizer:
    @classmethod
    def from_file(cls, _path: str) -> _Tokenizer:
        return cls()

    def enable_truncation(self, _max_length: int) -> None:
        pass

    def enable_padding(self) -> None:
        pass

    def encode_batch(self, texts: list[str]) -> list[_Encoding]:
        width = max(len(text.split()) for text in texts)
        return [_Encoding(text, width) for text in texts]


class _Input:
    def __init__(self, name: str) -> None:
        self.name = name


class _Session:
    options: Any = None

    def __init__(self, _path: str, options: Any, providers: list[str]) -> None:
        _Session.options = options

    def get_inputs(self) -> list[_Input]:
        return [_Input("input_ids"), _Input("attention_mask")]

    def run(self, _outputs: Any, _feeds: Any) -> Any:
        raise RuntimeError(TOO_LONG)


@pytest.fixture
def model_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    runtime = types.ModuleType("onnxruntime")
    runtime.SessionOptions = types.SimpleNamespace  # type: ignore[attr-defined]
    runtime.InferenceSession = _Session  # type: ignore[attr-defined]
    tokenizers = types.ModuleType("tokenizers")
    tokenizers.Tokenizer = _Tokenizer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "onnxruntime", runtime)
    monkeypatch.setitem(sys.modules, "tokenizers", tokenizers)
    (tmp_path / "model.onnx").write_bytes(b"")
    (tmp_path / "tokenizer.json").write_text("{}")
    return tmp_path


async def test_a_model_that_fails_on_a_batch_says_why_and_which_option_helps(model_dir):
    # It said "local: the model failed: Fail" (the exception's type alone): nothing told the
    # operator that a text longer than the model takes does it, nor what to change.
    embedder = LocalEmbedder(name="local", directory=str(model_dir), max_length=1024)
    with pytest.raises(ProviderError) as raised:
        await embedder.embed(model="m", texts=["a long text " * 300, "short"])
    message = str(raised.value)
    assert message.startswith("local: the model failed on 2 texts of up to 900 tokens:")
    assert "512 by 1024" in message
    assert "memory.embedders.local.max_length (1024)" in message
    # The texts' failure, not the embedder's: the lane splits the batch, so the texts the
    # model takes get their vectors.
    assert raised.value.refused_input
    # ONNX Runtime logs only what is fatal: the failure is this one message, not a line
    # of its own on stderr too.
    assert _Session.options.log_severity_level == 4


async def test_a_model_that_cannot_load_is_no_refusal_of_the_texts(tmp_path):
    embedder = LocalEmbedder(name="local", directory=str(tmp_path / "nowhere"))
    with pytest.raises(ProviderError) as raised:
        await embedder.embed(model="m", texts=["short"])
    assert not raised.value.refused_input


class _Positions512(_Session):
    """A model of 512 positions: a batch padded past them fails as ONNX Runtime does."""

    def run(self, _outputs: Any, feeds: Any) -> Any:
        import numpy as np

        ids = feeds["input_ids"]
        if ids.shape[1] > 512:
            raise RuntimeError(TOO_LONG)
        return [np.ones((ids.shape[0], 4), dtype=np.float32)]


async def test_a_text_past_the_models_positions_costs_only_its_own_vector(model_dir, clock,
                                                                         monkeypatch):
    # max_length above the model's positions: the long text failed its whole batch, and no
    # record of the scope got a vector.
    from scopemem.api.semantic import SemanticLane
    from scopemem.core.fusion import Fusion
    from scopemem.plugins.providers import ModelRef
    from scopemem.stores.memory import InMemoryStore
    from tests.conftest import fact

    monkeypatch.setattr(sys.modules["onnxruntime"], "InferenceSession", _Positions512)
    store = InMemoryStore(clock=clock)
    long = "a long text " * 300
    await store.write("org:acme", [fact("Rollouts wait for the database backup"), fact(long),
                                   fact("Redis keys expire after a day in staging")])
    lane = SemanticLane(LocalEmbedder(name="local", directory=str(model_dir), max_length=1024),
                        ModelRef("local", "m"), Fusion(0.4))
    done = await lane.embed_missing(store, "org:acme")
    assert (done.kept, done.refused) == (2, 1)
    assert [text for _id, text in await store.vectors_missing("org:acme", "local/m", 5)] == \
        [long]
