"""The semantic lane: ``memory.embeddings``, vectors at write time, the fused read."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Sequence

import pytest

from scopemem import ConfigError, Memory, MemoryConfig, Request
from scopemem.api.results import Caller
from scopemem.api.semantic import SemanticLane
from scopemem.core.fusion import Fusion
from scopemem.errors import StoreError, StoreUnsupported
from scopemem.plugins.manager import new_plugin_manager
from scopemem.plugins.providers import ModelRef, ProviderError
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.shared.vectors import pack
from tests.conftest import FakeClock, fact
from tests.fake_embedder import FakeEmbedder, Plugin

ORG = "org:acme"
PARAPHRASE = "Run the schema migration before you deploy the api"
KITCHEN = "The tables in the office kitchen need cleaning on fridays"
BRIEF = "how do we ship the release after changing postgres tables"


def config(**overrides: object) -> MemoryConfig:
    settings = {"enabled": True, "organization": "acme", "store": "memory",
                "embeddings": "fake/concepts", **overrides}
    return MemoryConfig(**settings)  # type: ignore[arg-type]


def bullets(block: str) -> list[str]:
    return [line[2:].split(" (source: ")[0] for line in block.splitlines()
            if line.startswith("- ")]


async def filled(clock: FakeClock, plugin: Plugin, **overrides: object) -> Memory:
    memory = Memory(config(**overrides), InMemoryStore(clock=clock),
                    plugin_manager=new_plugin_manager(load_entry_points=False,
                                                      extra_plugins=(plugin,)), clock=clock)
    await memory.store.write(ORG, [fact(PARAPHRASE), fact(KITCHEN),
                                   fact("Redis keys expire after a day in staging")])
    if memory.semantic is not None:
        await memory.semantic.embed_missing(memory.store, ORG)
    return memory


async def test_a_paraphrase_outranks_an_unrelated_keyword_hit(clock):
    memory = await filled(clock, Plugin())
    assert bullets(await memory.context_block(Request(text=BRIEF))) == [PARAPHRASE, KITCHEN]
    # The keyword read alone finds only the kitchen (the brief shares "tables" with it).
    plain = await filled(clock, Plugin(), embeddings=None)
    assert bullets(await plain.context_block(Request(text=BRIEF))) == [KITCHEN]


async def test_a_lane_given_to_memory_is_the_one_its_reads_use(clock):
    # A host (or a benchmark) may hand Memory its own lane; its reads must fuse with it,
    # not only its writes embed with it.
    embedder = FakeEmbedder()
    lane = SemanticLane(embedder, ModelRef("fake", "concepts"), Fusion(floor=0.4))
    memory = Memory(config(embeddings=None), InMemoryStore(clock=clock), clock=clock,
                    semantic=lane)
    await memory.store.write(ORG, [fact(PARAPHRASE), fact(KITCHEN)])
    await lane.embed_missing(memory.store, ORG)
    assert bullets(await memory.context_block(Request(text=BRIEF))) == [PARAPHRASE, KITCHEN]
    assert [BRIEF] in embedder.calls


async def test_the_floor_gates_what_only_the_cosine_brings_in(clock):
    memory = await filled(clock, Plugin(), embeddings_floor=0.9)
    assert bullets(await memory.context_block(Request(text=BRIEF))) == [KITCHEN]


async def test_the_cosine_share_is_the_models_configuration(clock):
    # The paraphrase (no shared word, cosine 0.58) leads at the default share; with the
    # cosine's share at 0.1 the kitchen's keyword match (0.1, cosine 0.14) outweighs it.
    memory = await filled(clock, Plugin(), embeddings_share=0.1)
    assert bullets(await memory.context_block(Request(text=BRIEF))) == [KITCHEN, PARAPHRASE]


async def test_off_the_embedder_is_never_built_nor_asked(clock):
    plugin = Plugin()
    memory = await filled(clock, plugin, embeddings=None)
    lane_on = await filled(clock, Plugin())
    brief = "who cleans the office kitchen"
    assert memory.semantic is None
    assert await memory.context_block(Request(text=brief)) == \
        await lane_on.context_block(Request(text=brief))
    assert plugin.embedder.calls == []


async def test_remember_embeds_the_record_it_writes(clock):
    plugin = Plugin()
    memory = await filled(clock, plugin)
    await memory.remember(Caller(user_key="user:cli:alice"),
                          "Rollouts wait for the database backup")
    assert await memory.store.vectors_missing("user:cli:alice", "fake/concepts", 10) == []
    assert plugin.embedder.calls[-1] == ["Rollouts wait for the database backup"]


async def test_embedding_missing_vectors_resumes_after_a_failure(clock):
    store = InMemoryStore(clock=clock)
    await store.write(ORG, [fact(f"lesson number {n} about caching layer {n}")
                            for n in range(70)])
    failing = SemanticLane(FakeEmbedder(fail_after=1), ModelRef("fake", "m"), Fusion(0.4))
    with pytest.raises(ProviderError):
        await failing.embed_missing(store, ORG)
    assert len(await store.vectors_missing(ORG, "fake/m", 100)) == 70 - 32
    steady = FakeEmbedder()
    done = await SemanticLane(steady, ModelRef("fake", "m"), Fusion(0.4)).embed_missing(
        store, ORG)
    assert done.kept == 70 - 32 and sum(map(len, steady.calls)) == 70 - 32
    assert await store.vectors_missing(ORG, "fake/m", 100) == []


@pytest.mark.parametrize(("vector", "reason"), [
    (b"\x00\x00\x80", "multiple of 4 bytes"),
    (pack([float("nan"), 1.0]), "not finite"),
    (pack([0.0, 0.0]), "length zero"),
    (b"", "multiple of 4 bytes"),
    (pack([1.0] * 4097), "multiple of 4 bytes"),
    ("1,2,3", "must be bytes"),
])
async def test_a_store_refuses_hostile_vectors(clock, vector, reason):
    store = InMemoryStore(clock=clock)
    await store.write(ORG, [fact("one lesson")])
    ((record_id, _text),) = await store.vectors_missing(ORG, "m", 5)
    with pytest.raises(StoreError, match=reason):
        await store.put_vectors(ORG, "m", [(record_id, vector)])


async def test_a_vector_of_other_dimensions_is_refused(clock):
    store = InMemoryStore(clock=clock)
    await store.write(ORG, [fact("one lesson"), fact("another lesson")])
    (first, _), (second, _) = await store.vectors_missing(ORG, "m", 5)
    assert await store.put_vectors(ORG, "m", [(first, pack([1.0, 0.0]))]) == 1
    with pytest.raises(StoreError, match="3 dimensions"):
        await store.put_vectors(ORG, "m", [(second, pack([1.0, 0.0, 0.0]))])
    with pytest.raises(StoreError, match="dimensions"):
        await store.nearest(ORG, "m", pack([1.0, 0.0, 0.0]), 5, 0.0)


@pytest.mark.parametrize(("settings", "key"), [
    ({"embeddings": "no-slash"}, "memory.embeddings"),
    ({"embeddings": "nobody/model"}, "memory.embeddings"),
    ({"embeddings_floor": 1.5}, "memory.embeddings_floor"),
    ({"embeddings_share": 1.5}, "memory.embeddings_share"),
    ({"embeddings_share": -0.1}, "memory.embeddings_share"),
    ({"embeddings": "local/minilm"}, "memory.embedders.local.directory"),
    ({"embeddings": "local/minilm", "embedders": {"local": {"directory": "/m", "x": 1}}},
     "memory.embedders.local.x"),
])
def test_bad_configuration_names_the_key(settings, key):
    document = {"memory": {"enabled": True, "organization": "acme", "store": "memory",
                           **settings}}
    with pytest.raises(ConfigError, match=f"^{key}"):
        Memory.from_config(document, plugin_manager=new_plugin_manager(
            environ={"SCOPEMEM_LOAD_PLUGINS": "memory"}))


def test_the_gate_is_a_keyword_match_or_a_cosine_at_the_floor():
    fusion = Fusion(floor=0.4)
    assert fusion.relevant(0.0, 0.4) and fusion.relevant(0.1, 0.0)
    assert not fusion.relevant(0.0, 0.39)
    assert fusion.match(0.5, 0.5) == pytest.approx(0.5)
    assert fusion.match(0.5, -0.3) == pytest.approx(0.3)


async def read_by_keyword_alone(clock, brief: str) -> Memory:
    """Asserts the lane stays out of ``brief``'s read: the embedder is not asked, and the
    block is the keyword read's. The memory with the lane on."""
    plugin = Plugin()
    memory = await filled(clock, plugin)
    asked = len(plugin.embedder.calls)
    plain = await filled(clock, Plugin(), embeddings=None)
    assert await memory.context_block(Request(text=brief)) == \
        await plain.context_block(Request(text=brief))
    assert len(plugin.embedder.calls) == asked
    return memory


async def test_a_long_brief_is_read_by_keyword_alone(clock):
    """A pasted log: its vector would be about the routine lines, so the lane stays out."""
    routine = " ".join(f"INFO worker step {n} took {n} ms" for n in range(12))
    memory = await read_by_keyword_alone(clock, f"{BRIEF} {routine}")
    # The same brief cut to its first line is read by both lanes.
    assert bullets(await memory.context_block(Request(text=BRIEF)))[0] == PARAPHRASE


@pytest.mark.parametrize("brief", ["", "   \n\t "])
async def test_a_blank_brief_asks_the_embedder_nothing(clock, brief):
    """A blank brief names nothing: its vector of no text would be near whatever the
    embedder likes, and bring those records in."""
    await read_by_keyword_alone(clock, brief)


class Scripted:
    """An embedder answering each call with the next planned vector for every text."""

    def __init__(self, *plan: list[float]) -> None:
        self.plan = list(plan)

    async def embed(self, *, model: str, texts: list[str]) -> list[list[float]]:
        vector = self.plan.pop(0) if len(self.plan) > 1 else self.plan[0]
        return [vector for _text in texts]

    async def close(self) -> None:
        return None


async def test_a_query_of_other_dimensions_does_not_fix_the_models_dimensions(clock):
    """One reply of the wrong size (a gateway's fallback model), refused by the store at
    the read, costs that read only: the lane goes on with the model's real vectors."""
    store = InMemoryStore(clock=clock)
    await store.write(ORG, [fact("one lesson"), fact("another lesson")])
    lane = SemanticLane(Scripted([1.0, 0.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0, 0.0]),
                        ModelRef("fake", "m"), Fusion(0.4))
    await lane.query("a brief")
    assert (await lane.embed_missing(store, ORG)).kept == 2
    assert len(await lane.query("another brief")) == 2 * 4
    # What a store took is the model's size from then on.
    with pytest.raises(ProviderError, match="3 dimensions after 2"):
        await lane.query("a third brief")


async def test_an_integer_too_large_for_a_float_is_the_embedders_failure():
    """JSON allows ``1e400`` written as an integer; it must cost the lane, not raise past
    the ``ProviderError`` the backfill and the writes expect."""
    lane = SemanticLane(Scripted([10 ** 400, 1]), ModelRef("fake", "m"), Fusion(0.4))
    with pytest.raises(ProviderError, match="^embedder fake: .*not finite"):
        await lane.query("a brief")


@pytest.mark.parametrize("value", [1e308, 1e-200])
async def test_a_vector_of_extreme_finite_values_keeps_its_direction(value):
    lane = SemanticLane(Scripted([value, value]), ModelRef("fake", "m"), Fusion(0.4))
    assert await lane.query("a brief") == pack([0.5 ** 0.5, 0.5 ** 0.5])


async def test_the_progress_counts_the_vectors_kept(clock):
    """A record that leaves active status while its batch is embedded is not counted."""

    class Forgetting(InMemoryStore):
        async def vectors_missing(self, scope_key, model, limit):  # type: ignore[no-untyped-def]
            missing = await super().vectors_missing(scope_key, model, limit)
            if missing:
                await self.forget(scope_key, missing[0][0])
            return missing

    store = Forgetting(clock=clock)
    await store.write(ORG, [fact("one lesson"), fact("another lesson"), fact("a third")])
    counted: list[int] = []
    lane = SemanticLane(FakeEmbedder(), ModelRef("fake", "m"), Fusion(0.4))
    kept = await lane.embed_missing(store, ORG, progress=counted.append)
    assert sum(counted) == kept.kept


class _SilentForBriefs(FakeEmbedder):
    """Embeds records at once and never answers a brief (an embedding server that hangs)."""

    async def embed(self, *, model: str, texts: Sequence[str]) -> list[list[float]]:
        if texts == [BRIEF]:
            await asyncio.Event().wait()
        return await super().embed(model=model, texts=texts)


async def test_an_embedder_that_never_answers_costs_the_lane_not_the_turn(clock, caplog):
    memory = await filled(clock, Plugin(_SilentForBriefs()), embeddings_wait_seconds=0.05)
    plain = await filled(clock, Plugin(), embeddings=None)
    block = await memory.context_block(Request(text=BRIEF))
    assert block == await plain.context_block(Request(text=BRIEF))
    assert "no vector for the brief within 0.05 s" in caplog.text


@pytest.mark.parametrize("wait", [0, -1, float("nan"), float("inf"), 301])
def test_the_wait_for_a_briefs_vector_is_checked(wait):
    with pytest.raises(ConfigError, match="^memory.embeddings_wait_seconds"):
        Memory.from_config({"memory": {"enabled": True, "organization": "acme",
                                       "store": "memory", "embeddings_wait_seconds": wait}},
                           plugin_manager=new_plugin_manager(
                               environ={"SCOPEMEM_LOAD_PLUGINS": "memory"}))


class _SilentForRecords(FakeEmbedder):
    """Answers briefs at once and never answers for a record's text."""

    async def embed(self, *, model: str, texts: Sequence[str]) -> list[list[float]]:
        if "Rollouts wait for the database backup" in texts:
            await asyncio.Event().wait()
        return await super().embed(model=model, texts=texts)


async def test_remember_answers_though_the_embedder_never_does(clock, caplog):
    memory = await filled(clock, Plugin(_SilentForRecords()), embeddings_wait_seconds=0.05)
    result = await memory.remember(Caller(user_key="user:cli:alice"),
                                   "Rollouts wait for the database backup")
    assert result.outcome == "inserted"
    missing = await memory.store.vectors_missing("user:cli:alice", "fake/concepts", 10)
    assert [text for _id, text in missing] == ["Rollouts wait for the database backup"]
    assert "did not finish within 0.05 s" in caplog.text


class _Down(InMemoryStore):
    async def search(self, *args: object, **kwargs: object) -> list[object]:
        raise StoreError("down")


async def test_a_failed_briefs_vector_no_scope_read_waited_for_is_not_left_unretrieved(
        clock, monkeypatch):
    # With the store and the embedder both down, no scope read awaits the brief's vector,
    # and its task, cancelled as its embedder's failure came in, ended with that failure:
    # asyncio logged it as "Task exception was never retrieved" (an ERROR with a traceback
    # in the host's logs) once the task was collected.
    memory = Memory(config(), _Down(clock=clock), clock=clock,
                    plugin_manager=new_plugin_manager(
                        load_entry_points=False,
                        extra_plugins=(Plugin(FakeEmbedder(fail_after=0)),)))
    # Its warnings' records would keep the read's frames, and the task, from collection.
    monkeypatch.setattr(logging.getLogger("scopemem"), "disabled", True)
    unhandled: list[str] = []
    asyncio.get_running_loop().set_exception_handler(
        lambda _loop, context: unhandled.append(context["message"]))
    assert await memory.context_block(Request(text=BRIEF)) == ""
    for _ in range(3):  # the cancelled task's last steps
        await asyncio.sleep(0)
    gc.collect()
    assert unhandled == []
    await memory.close()


class _NoVectors:
    """A store of a plugin that keeps no vectors: only what the keyword read needs."""

    def __init__(self, store: InMemoryStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> object:
        if name in ("vectors_missing", "put_vectors", "nearest"):
            raise AttributeError(name)
        return getattr(self._store, name)


async def test_a_store_without_vectors_never_has_the_brief_embedded(clock):
    plugin = Plugin()
    store = InMemoryStore(clock=clock)
    await store.write(ORG, [fact(KITCHEN)])
    memory = Memory(config(), _NoVectors(store), clock=clock,  # type: ignore[arg-type]
                    plugin_manager=new_plugin_manager(load_entry_points=False,
                                                      extra_plugins=(plugin,)))
    assert bullets(await memory.context_block(Request(text=BRIEF))) == [KITCHEN]
    assert plugin.embedder.calls == []  # the lane is idle: nothing to ask an embedder for


def test_the_local_embedder_without_its_directory_says_what_it_needs():
    # It said "must not be empty" of a key the file never had.
    document = {"memory": {"enabled": True, "organization": "acme", "store": "memory",
                           "embeddings": "local/all-MiniLM-L6-v2"}}
    with pytest.raises(ConfigError, match="^memory.embedders.local.directory: required: the "
                                          "folder holding model.onnx and tokenizer.json$"):
        Memory.from_config(document, plugin_manager=new_plugin_manager(
            environ={"SCOPEMEM_LOAD_PLUGINS": "memory"}))


async def test_a_store_serving_no_vectors_idles_the_lane_after_one_warning(clock,
                                                                           memory_warnings):
    """A worker of an older release serves none of the vector routes: the first read or
    write that asks says so once, and the lane then asks neither the store nor the embedder
    (every turn warned per scope and embedded its brief for nothing)."""
    plugin = Plugin()
    memory = Memory(config(), InMemoryStore(clock=clock),
                    plugin_manager=new_plugin_manager(load_entry_points=False,
                                                      extra_plugins=(plugin,)), clock=clock)
    asked: list[str] = []

    async def unsupported(*_args: object, **_kwargs: object) -> object:
        asked.append("vectors")
        raise StoreUnsupported("memory worker /nearest failed: answered 404: not found")

    store = memory.store
    store.nearest = store.vectors_missing = store.put_vectors = unsupported  # type: ignore[attr-defined]
    await store.write(ORG, [fact(PARAPHRASE), fact(KITCHEN)])
    for _ in range(3):
        assert bullets(await memory.context_block(Request(text=BRIEF))) == [KITCHEN]
    await memory.remember(Caller(user_key="user:slack:U1"), "Deploys go out on tuesdays", "me")
    assert len(asked) == 1 and len(plugin.embedder.calls) == 1
    assert memory_warnings() == ["[memory] the store keeps no vectors (memory worker /nearest"
                                 " failed: answered 404: not found); the semantic lane is idle"]
    await memory.close()
