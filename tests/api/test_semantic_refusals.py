"""A text the embedder refuses (an embedding server answering 400 to a text longer than its
model takes, as vLLM does) costs its own record's vector, never its scope's: the writes and
the backfill go on past it. A server that is down costs one call a batch, as ever."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pytest

from scopemem import Memory, MemoryConfig
from scopemem.api.results import Caller
from scopemem.api.semantic import SemanticLane
from scopemem.core.fusion import Fusion
from scopemem.plugins.providers import ModelRef, ProviderError
from scopemem.stores.memory import InMemoryStore
from tests.conftest import fact
from tests.fake_embedder import FakeEmbedder
from tests.fake_model import FakeModel, fake_model_server

MODEL = "openai/fake-embedder"
ALICE = Caller(user_key="user:cli:alice")
SCOPE = "user:cli:alice"
LIMIT = 300  # characters the fake server embeds; longer texts are refused
LONG = " ".join(f"Step {n} of the deploy checklist checks the migration output."
                for n in range(12))
SHORT = ["Rollouts wait for the database backup",
         "Redis keys expire after a day in staging",
         "The api deploys from the release branch only"]


@pytest.fixture
def server() -> Iterator[FakeModel]:
    with fake_model_server() as model:
        yield model


def memory_of(server: FakeModel, clock: object, store: InMemoryStore | None = None) -> Memory:
    config = MemoryConfig(enabled=True, organization="acme", store="memory",  # type: ignore[arg-type]
                          embeddings=MODEL,
                          embedders={"openai": {"base_url": server.base_url,
                                                "timeout_seconds": 5}})
    return Memory(config, store or InMemoryStore(clock=clock), clock=clock,  # type: ignore[arg-type]
                  environ={})


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.levelno == logging.WARNING and "vector" in record.getMessage()]


async def test_a_refused_text_costs_only_its_own_records_vector(server, clock, caplog):
    assert len(LONG) > LIMIT
    server.embed_limit = LIMIT
    memory = memory_of(server, clock)
    try:
        await memory.remember(ALICE, LONG)
        for text in SHORT:
            await memory.remember(ALICE, text)
        missing = await memory.store.vectors_missing(SCOPE, MODEL, 10)
        assert [text for _id, text in missing] == [LONG]
        # The write that met the refusal says so once, naming how many and why; the writes
        # after it (which no longer ask for the refused text) say nothing.
        warned = refusals(caplog)
        assert len(warned) == 1, warned
        assert "1 record(s) of user:cli:alice got no vector: the embedder refused their " \
            "text (the first, mem:user:cli:alice:1: openai: HTTP 400" in warned[0]
        assert "maximum context length" in warned[0]
        # Asked once by this process: not at every later write.
        assert sum(LONG in texts for texts in server.embedded) == 1
    finally:
        await memory.close()


async def test_a_batch_with_a_refused_text_keeps_the_others_vectors(server, clock):
    server.embed_limit = LIMIT
    store = InMemoryStore(clock=clock)
    await store.write(SCOPE, [fact(SHORT[0]), fact(LONG), *(fact(text) for text in SHORT[1:])])
    memory = memory_of(server, clock, store)
    try:
        assert memory.semantic is not None
        done = await memory.semantic.embed_missing(store, SCOPE)
        assert (done.kept, done.refused) == (3, 1)
        assert done.reason is not None and "HTTP 400" in done.reason
        assert [text for _id, text in await store.vectors_missing(SCOPE, MODEL, 10)] == [LONG]
        # Another process (a new lane) asks for it once more; a server that now takes it
        # gives it its vector.
        server.embed_limit = None
        again = memory_of(server, clock, store)
        try:
            assert again.semantic is not None
            assert (await again.semantic.embed_missing(store, SCOPE)).kept == 1
            assert await store.vectors_missing(SCOPE, MODEL, 10) == []
        finally:
            await again.close()  # closes the store too: nothing reads it after
    finally:
        await memory.close()


@pytest.mark.parametrize("status", [500, 401, 403, 404])
async def test_a_server_that_is_down_costs_one_call_a_batch(server, clock, status):
    server.embed_status = status
    store = InMemoryStore(clock=clock)
    await store.write(SCOPE, [fact(text) for text in SHORT])
    memory = memory_of(server, clock, store)
    try:
        assert memory.semantic is not None
        with pytest.raises(ProviderError, match=f"HTTP {status}"):
            await memory.semantic.embed_missing(store, SCOPE)
        assert server.embedded == [SHORT]
    finally:
        await memory.close()


class _ZeroFor(FakeEmbedder):
    """A zero vector for a text holding ``word``: unusable for that text alone."""

    def __init__(self, word: str) -> None:
        super().__init__()
        self.word = word

    async def embed(self, *, model: str, texts: Sequence[str]) -> list[list[float]]:
        vectors = await super().embed(model=model, texts=texts)
        return [[0.0] * len(vector) if self.word in text else vector
                for text, vector in zip(texts, vectors, strict=True)]


async def test_a_vector_unusable_for_one_text_costs_that_text_only(clock):
    store = InMemoryStore(clock=clock)
    await store.write(SCOPE, [fact(text) for text in [*SHORT, "An empty lesson here"]])
    lane = SemanticLane(_ZeroFor("empty"), ModelRef("fake", "m"), Fusion(0.4))
    done = await lane.embed_missing(store, SCOPE)
    assert (done.kept, done.refused) == (3, 1)
    assert done.reason is not None and "zero" in done.reason
    assert [text for _id, text in await store.vectors_missing(SCOPE, "fake/m", 10)] == \
        ["An empty lesson here"]


class _RefusesAll(FakeEmbedder):
    async def embed(self, *, model: str, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        raise ProviderError("fake: too long", refused_input=True)


async def test_a_scope_of_too_many_refused_texts_stops_with_an_error(clock, monkeypatch):
    """The lane steps over at most MAX_REFUSED refused records of a scope (a store answers
    a bounded page of records without a vector): past that the run stops, saying so."""
    from scopemem.api import semantic

    monkeypatch.setattr(semantic, "MAX_REFUSED", 3)
    store = InMemoryStore(clock=clock)
    await store.write(SCOPE, [fact(f"lesson {n} about the caching layer") for n in range(40)])
    embedder = _RefusesAll()
    lane = SemanticLane(embedder, ModelRef("fake", "m"), Fusion(0.4))
    with pytest.raises(ProviderError, match="refused the text of more than 3 records of "
                       "user:cli:alice .the first, mem:user:cli:alice:1: fake: too long"):
        await lane.embed_missing(store, SCOPE)
    assert len(embedder.calls) == 2 * 32 - 1  # one batch, split down to each text
