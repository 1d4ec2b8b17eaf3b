"""The built-in OpenAI-compatible embedding client, against a real local aiohttp server."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from scopemem import MemoryConfig
from scopemem.api.semantic import SemanticLane
from scopemem.core.fusion import Fusion
from scopemem.errors import PluginError
from scopemem.plugins.embedders import build_embedder
from scopemem.plugins.manager import new_plugin_manager
from scopemem.plugins.providers import ModelRef, ProviderError


class Server:
    """Answers each POST with the next planned (status, body, headers)."""

    def __init__(self) -> None:
        self.plan: list[tuple[int, object]] = []
        self.bodies: list[dict] = []
        self.base = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.json())
        status, body = self.plan.pop(0) if self.plan else (500, {"error": "no plan"})
        if body == "echo":
            texts = self.bodies[-1]["input"]
            body = {"data": [{"index": i, "embedding": [1.0, float(i), 0.5]}
                             for i in reversed(range(len(texts)))]}
        if isinstance(body, bytes):  # sent as is
            return web.Response(status=status, body=body, content_type="application/json")
        return web.Response(status=status, text=json.dumps(body),
                            headers={"Retry-After": "0"} if status == 503 else {})


@pytest.fixture
async def server(aiohttp_server):
    api = Server()
    app = web.Application()
    app.router.add_post("/v1/embeddings", api.handle)
    running = await aiohttp_server(app)
    api.base = f"http://127.0.0.1:{running.port}/v1"
    return api


@pytest.fixture
async def lane(server):
    config = MemoryConfig(embedders={"openai": {"base_url": server.base,
                                                "timeout_seconds": 5}})
    ref = ModelRef("openai", "text-embedding-3-small")
    embedder = build_embedder(new_plugin_manager(load_entry_points=False), config, ref,
                              {"OPENAI_API_KEY": "sk-test-key-123"})
    lane = SemanticLane(embedder, ref, Fusion(0.4))
    yield lane
    await lane.close()


async def test_vectors_come_back_in_the_texts_order(server, lane):
    server.plan = [(200, "echo")]
    first, second = await lane.vectors(["alpha", "beta"])
    assert server.bodies == [{"model": "text-embedding-3-small", "input": ["alpha", "beta"]}]
    import numpy as np

    assert np.frombuffer(second, dtype="<f4")[1] > np.frombuffer(first, dtype="<f4")[1]


async def test_a_503_is_retried(server, lane):
    server.plan = [(503, {"error": {"message": "busy"}}), (200, "echo")]
    assert len(await lane.vectors(["alpha"])) == 1
    assert len(server.bodies) == 2


async def test_a_refusal_is_a_clear_error_without_the_key(server, lane):
    server.plan = [(400, {"error": {"message": "bad input sk-test-key-123"}})]
    with pytest.raises(ProviderError, match="HTTP 400") as caught:
        await lane.vectors(["alpha"])
    assert "sk-test-key-123" not in str(caught.value)


async def test_a_refusal_without_a_key_names_the_variable_and_its_setting(server):
    config = MemoryConfig(embedders={"openai": {"base_url": server.base,
                                                "api_key_env": "EMBED_KEY"}})
    embedder = build_embedder(new_plugin_manager(load_entry_points=False), config,
                              ModelRef("openai", "m"), {"EMBED_KEYS": "sk-test-key-123"})
    server.plan = [(401, {"error": {"message": "You didn't provide an API key."}})]
    try:
        with pytest.raises(ProviderError, match="EMBED_KEY is not set; "
                           r"memory\.embedders\.openai\.api_key_env names it"):
            await embedder.embed(model="m", texts=["alpha"])
    finally:
        await embedder.close()


@pytest.mark.parametrize(("reply", "reason"), [
    ({"data": [{"index": 0, "embedding": [1.0, 2.0]}, {"index": 1, "embedding": [1.0]}]},
     "dimensions"),
    ({"data": [{"index": 0, "embedding": [1.0, 2.0]}]}, "expected 2 embeddings"),
    ({"data": [{"index": 0, "embedding": ["x"]}, {"index": 1, "embedding": [1.0]}]},
     "not a list of numbers"),
    ({"data": [{"index": 0, "embedding": [0.0]}, {"index": 1, "embedding": [1.0]}]},
     "zero"),
    # JSON nested past the parser's recursion limit is no reply either.
    (b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "not JSON"),
])
async def test_an_unusable_reply_is_a_clear_error(server, lane, reply, reason):
    server.plan = [(200, reply)]
    with pytest.raises(ProviderError, match=reason):
        await lane.vectors(["alpha", "beta"])


def test_scopemem_register_embedders_registers_the_built_ins_and_a_plugins():
    from scopemem import hookimpl
    from scopemem.plugins.embedders import embedder_registry
    from tests.fake_embedder import Plugin

    class Twice:
        @hookimpl
        def scopemem_register_embedders(self, register):
            register("openai", lambda settings: None)

    registry = embedder_registry(new_plugin_manager(load_entry_points=False,
                                                    extra_plugins=(Plugin(),)))
    assert {"openai", "local", "fake"} <= set(registry.names())
    with pytest.raises(PluginError, match="'openai' is registered twice"):
        embedder_registry(new_plugin_manager(load_entry_points=False,
                                             extra_plugins=(Twice(),)))


def test_credentials_in_the_url_beside_a_key_are_a_config_error_naming_base_url():
    # Both would go in the Authorization header: the client refused the request with a
    # ValueError at the first call (a traceback from `scopemem embeddings backfill`).
    from scopemem.errors import ConfigError
    from scopemem.plugins.providers import build_provider

    pm = new_plugin_manager(load_entry_points=False)
    url = "http://bob:hunter2-pass@127.0.0.1:1/v1"
    key = {"OPENAI_API_KEY": "sk-test-key-123"}
    with pytest.raises(ConfigError) as raised:
        build_embedder(pm, MemoryConfig(embedders={"openai": {"base_url": url}}),
                       ModelRef("openai", "m"), key)
    message = str(raised.value)
    assert message.startswith("memory.embedders.openai.base_url:"), message
    assert "hunter2" not in message and "sk-test-key-123" not in message
    with pytest.raises(ConfigError, match="^memory.providers.openai.base_url:"):
        build_provider(pm, MemoryConfig(providers={"openai": {"base_url": url}}),
                       ModelRef("openai", "m"), key)
    # Without the key, the URL's credentials are the ones sent (Basic), as before.
    build_embedder(pm, MemoryConfig(embedders={"openai": {"base_url": url}}),
                   ModelRef("openai", "m"), {})


@pytest.mark.parametrize(("status", "refused_input"), [
    (400, True), (413, True), (422, True), (401, False), (403, False), (404, False),
    (500, False),
])
async def test_a_refusal_of_the_input_says_so_and_no_other_failure_does(server, lane, status,
                                                                       refused_input):
    # The lane splits a batch only when the texts themselves were refused (a text longer
    # than the model takes): a server that is down or a key refused is asked once a batch.
    server.plan = [(status, {"error": {"message": "no"}})]
    with pytest.raises(ProviderError) as raised:
        await lane.vectors(["alpha", "beta"])
    assert raised.value.refused_input is refused_input
    assert len(server.bodies) == 1


async def test_a_vector_unusable_for_its_text_is_that_texts_refusal(server, lane):
    server.plan = [(200, {"data": [{"index": 0, "embedding": [0.0]},
                                   {"index": 1, "embedding": [1.0]}]})]
    with pytest.raises(ProviderError, match="zero") as raised:
        await lane.vectors(["alpha", "beta"])
    assert raised.value.refused_input
