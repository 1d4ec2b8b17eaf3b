"""Model providers: model refs, the registry, option validation, and both built-in clients
against local aiohttp servers that speak each API (network only to 127.0.0.1)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import subprocess
import sys
import time
from typing import Any

import attrs
import pytest
from aiohttp import web

from scopemem import ConfigError, MemoryConfig, ScopememError, hookimpl
from scopemem.plugins import builtin_providers
from scopemem.plugins.builtin_providers import AnthropicProvider, OpenAIProvider
from scopemem.plugins.manager import BUILTIN_PLUGINS, new_plugin_manager
from scopemem.plugins.providers import (
    ModelRef,
    Provider,
    ProviderError,
    ProviderSettings,
    build_provider,
    parse_model_ref,
    provider_registry,
)

KEY = "sk-test-0123456789abcdefSECRET"
SYSTEM = "You distill runs into durable lessons."
USER = "transcript: the deploy failed because the cache was cold"

KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
API_PATH = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
OK_REPLY: dict[str, Any] = {
    "openai": {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": '{"facts": []}'}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3},
    },
    "anthropic": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [{"type": "text", "text": '{"facts": '},
                    {"type": "thinking", "thinking": "not part of the answer"},
                    {"type": "text", "text": "[]}"}],
        "stop_reason": "end_turn",
    },
}
OK_TEXT = '{"facts": []}'
KINDS = ["openai", "anthropic"]


# --- a local server that speaks the API


@attrs.define
class FakeApi:
    """One local endpoint: records every request and answers with ``status``/``reply``
    (a JSON-able value, or raw bytes sent as is). ``hold`` makes the handler wait for
    ``release`` first (for timeouts)."""

    status: int = 200
    reply: Any = None
    hold: bool = False
    release: asyncio.Event = attrs.field(factory=asyncio.Event)
    hits: list[dict[str, Any]] = attrs.field(factory=list)
    base: str = ""
    # Answers before ``status``/``reply``, one per request: (status, headers).
    first: list[tuple[int, dict[str, str]]] = attrs.field(factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.hits.append({"method": request.method, "path": request.path,
                          "query": request.query_string, "headers": dict(request.headers),
                          "raw": raw})
        if self.hold:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.release.wait(), 5)
        body = self.reply if isinstance(self.reply, bytes) else json.dumps(self.reply).encode()
        if self.first:
            status, headers = self.first.pop(0)
            return web.Response(status=status, body=b"{}", headers=headers,
                                content_type="application/json")
        return web.Response(status=self.status, body=body, content_type="application/json")

    @property
    def body(self) -> Any:
        (hit,) = self.hits
        return json.loads(hit["raw"])

    @property
    def headers(self) -> dict[str, str]:
        (hit,) = self.hits
        return {name.lower(): value for name, value in hit["headers"].items()}


@pytest.fixture
def pm():
    return new_plugin_manager(load_entry_points=False)


@pytest.fixture
async def fake(aiohttp_server):
    api = FakeApi()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", api.handle)
    server = await aiohttp_server(app)
    api.base = f"http://127.0.0.1:{server.port}"
    yield api
    api.release.set()


@pytest.fixture
async def make(pm, fake):
    """Build a provider through the registry and config, pointed at the fake server."""
    built: list[Provider] = []

    def _make(kind: str, *, key: str | None = KEY, model: str = "some-model",
              **options: Any) -> Provider:
        options.setdefault("base_url", fake.base + ("/v1" if kind == "openai" else ""))
        config = MemoryConfig(providers={kind: options})
        environ = {KEY_ENV[kind]: key} if key is not None else {}
        provider = build_provider(pm, config, ModelRef(kind, model), environ)
        built.append(provider)
        return provider

    yield _make
    for provider in built:
        await provider.close()


async def ask(provider: Provider, **overrides: Any) -> str:
    arguments = {"model": "some-model", "system": SYSTEM, "user": USER, **overrides}
    return await provider.complete(**arguments)


# --- parse_model_ref


@pytest.mark.parametrize(("ref", "provider", "model"), [
    ("openai/gpt-4o-mini", "openai", "gpt-4o-mini"),
    ("anthropic/claude-3-5-haiku-latest", "anthropic", "claude-3-5-haiku-latest"),
    ("openai/meta-llama/Llama-3", "openai", "meta-llama/Llama-3"),
    ("local/qwen2.5:7b", "local", "qwen2.5:7b"),
])
def test_parse_model_ref_splits_at_the_first_slash(ref, provider, model):
    parsed = parse_model_ref(ref)
    assert parsed == ModelRef(provider=provider, model=model)
    assert str(parsed) == ref


@pytest.mark.parametrize(("ref", "reason"), [
    ("", "empty"),
    ("gpt-4o-mini", "no '/'"),
    ("/gpt-4o", "no provider"),
    ("openai/", "no model"),
    ("/", "no provider"),
    ("openai/gpt 4o", "whitespace"),
    (" openai/gpt-4o", "whitespace"),
    ("openai/gpt-4o\n", "whitespace"),
    (None, "must be a string"),
])
def test_parse_model_ref_refuses_what_it_cannot_split(ref, reason):
    with pytest.raises(ValueError, match=reason):
        parse_model_ref(ref)


def test_model_ref_is_frozen():
    ref = ModelRef("openai", "gpt-4o-mini")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        ref.model = "other"  # type: ignore[misc]


# --- the registry and building


def test_both_builtins_register_through_the_hook(pm):
    assert "scopemem.plugins.builtin_providers" in BUILTIN_PLUGINS
    registry = provider_registry(pm)
    assert {"openai", "anthropic"} <= set(registry.names())
    assert registry.get("openai") == OpenAIProvider.from_settings
    assert registry.get("anthropic") == AnthropicProvider.from_settings


def test_an_unknown_provider_lists_the_installed_ones(pm):
    with pytest.raises(ProviderError) as raised:
        build_provider(pm, MemoryConfig(), parse_model_ref("mistral/large"), {})
    message = str(raised.value)
    assert "'mistral'" in message
    assert "anthropic, openai" in message
    assert "(plugin may not be installed)" in message
    assert isinstance(raised.value, ScopememError)


def test_disabling_the_builtin_plugin_removes_its_providers():
    pm = new_plugin_manager(load_entry_points=False, environ={
        "SCOPEMEM_DISABLED_PLUGINS": "scopemem.plugins.builtin_providers"})
    assert provider_registry(pm).names() == []
    with pytest.raises(ProviderError, match="installed: none"):
        build_provider(pm, MemoryConfig(), ModelRef("openai", "x"), {})


def test_a_third_party_provider_gets_its_options_and_the_environment():
    seen: list[ProviderSettings] = []

    class Echo:
        def __init__(self, prefix: str) -> None:
            self.prefix = prefix

        async def complete(self, *, model, system, user, max_tokens=1024):
            return f"{self.prefix}{model}:{user}"

        async def close(self) -> None:
            pass

    def factory(settings: ProviderSettings) -> Echo:
        seen.append(settings)
        settings.unknown_options(["prefix"])
        return Echo(settings.string_option("prefix", "> "))

    class Plugin:
        @hookimpl
        def scopemem_register_providers(self, register):
            register("echo", factory)

    pm = new_plugin_manager(load_entry_points=False, extra_plugins=(Plugin(),))
    config = MemoryConfig(providers={"echo": {"prefix": "# "}})
    provider = build_provider(pm, config, parse_model_ref("echo/tiny/v1"), {"HOME": "/x"})
    assert isinstance(provider, Provider)
    assert asyncio.run(provider.complete(model="tiny/v1", system="s", user="u")) == "# tiny/v1:u"
    (settings,) = seen
    assert settings.name == "echo"
    assert dict(settings.options) == {"prefix": "# "}
    assert dict(settings.environ) == {"HOME": "/x"}

    bad = MemoryConfig(providers={"echo": {"prefx": "# "}})
    with pytest.raises(ConfigError, match=r"memory\.providers\.echo\.prefx: unknown option"):
        build_provider(pm, bad, parse_model_ref("echo/tiny"), {})


def test_a_factory_that_returns_no_provider_is_refused():
    class Broken:
        @hookimpl
        def scopemem_register_providers(self, register):
            register("broken", lambda settings: object())

    pm = new_plugin_manager(load_entry_points=False, extra_plugins=(Broken(),))
    with pytest.raises(ProviderError, match="'broken'.*does not implement complete"):
        build_provider(pm, MemoryConfig(), ModelRef("broken", "m"), {})


def test_a_factory_that_returns_no_provider_is_refused_at_startup_and_by_config_check():
    """As a store factory's is: memory does not start (nor ``config check`` pass) with a
    provider every reflection would skip with a warning."""
    from scopemem import Memory
    from scopemem.installation import check_plugin_tables

    class Hollow:
        @hookimpl
        def scopemem_register_providers(self, register):
            register("hollow", lambda settings: None)

    pm = new_plugin_manager(environ={"SCOPEMEM_LOAD_PLUGINS": ""}, extra_plugins=(Hollow(),))
    config = {"memory": {"enabled": True, "organization": "acme", "store": "memory",
                         "model": "hollow/m"}}
    message = "provider 'hollow': the factory returned NoneType, which does not implement"
    with pytest.raises(ProviderError, match=message):
        check_plugin_tables(MemoryConfig(**config["memory"]), pm)
    with pytest.raises(ProviderError, match=message):
        Memory.from_config(config, plugin_manager=pm)


def test_building_reads_os_environ_when_none_is_given(pm, monkeypatch):
    monkeypatch.setenv("MY_KEY_VAR", "sk-from-the-environment-1234")
    config = MemoryConfig(providers={"anthropic": {"api_key_env": "MY_KEY_VAR"}})
    provider = build_provider(pm, config, ModelRef("anthropic", "m"))
    assert provider._api_key == "sk-from-the-environment-1234"


@pytest.mark.parametrize("kind", KINDS)
def test_defaults_when_the_table_is_absent(pm, kind):
    provider = build_provider(pm, MemoryConfig(), ModelRef(kind, "m"), {})
    assert isinstance(provider, Provider)
    assert provider.base_url == {"openai": "https://api.openai.com/v1",
                                 "anthropic": "https://api.anthropic.com"}[kind]
    assert provider.api_key_env == KEY_ENV[kind]
    assert provider.timeout_seconds == 60


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("options", "key", "problem"), [
    ({"model": "gpt"}, "model", "unknown option"),
    ({"base_url": 8080}, "base_url", "expected a string"),
    ({"base_url": ""}, "base_url", "must not be empty"),
    ({"base_url": "ftp://example.com"}, "base_url", "http:// or https://"),
    ({"base_url": "127.0.0.1:8080"}, "base_url", "http:// or https://"),
    ({"base_url": "http://127.0.0.1:8080/v1?x=1"}, "base_url", "without a query"),
    ({"api_key_env": ["A"]}, "api_key_env", "expected a string"),
    ({"api_key_env": "MY KEY"}, "api_key_env", "name of an environment variable"),
    ({"timeout_seconds": 0}, "timeout_seconds", "positive number"),
    ({"timeout_seconds": -5}, "timeout_seconds", "positive number"),
    ({"timeout_seconds": "60"}, "timeout_seconds", "expected a positive number"),
    ({"timeout_seconds": True}, "timeout_seconds", "expected a positive number"),
    ({"timeout_seconds": float("nan")}, "timeout_seconds", "positive number"),
    ({"timeout_seconds": float("inf")}, "timeout_seconds", "positive number"),
])
def test_bad_options_name_their_key(pm, kind, options, key, problem):
    config = MemoryConfig(providers={kind: options})
    with pytest.raises(ConfigError) as raised:
        build_provider(pm, config, ModelRef(kind, "m"), {})
    message = str(raised.value)
    assert message.startswith(f"memory.providers.{kind}.{key}:"), message
    assert problem in message


def test_a_key_pasted_into_api_key_env_is_refused_without_echoing_it(pm):
    config = MemoryConfig(providers={"openai": {"api_key_env": KEY}})
    with pytest.raises(ConfigError) as raised:
        build_provider(pm, config, ModelRef("openai", "m"), {})
    assert "memory.providers.openai.api_key_env" in str(raised.value)
    assert KEY not in str(raised.value)


@pytest.mark.parametrize("kind", KINDS)
def test_good_options_are_accepted(pm, kind):
    config = MemoryConfig(providers={kind: {
        "base_url": "http://127.0.0.1:11434/v1/", "api_key_env": "LOCAL_KEY",
        "timeout_seconds": 2.5}})
    provider = build_provider(pm, config, ModelRef(kind, "m"), {"LOCAL_KEY": KEY})
    assert provider.base_url == "http://127.0.0.1:11434/v1"
    assert provider.timeout_seconds == 2.5
    assert KEY not in repr(provider)


def test_loading_and_building_providers_does_not_import_aiohttp():
    code = (
        "import sys\n"
        "from scopemem.plugins.registry import Registry\n"
        "from scopemem.plugins import builtin_providers as b\n"
        "from scopemem.plugins.providers import ProviderSettings\n"
        "r = Registry('provider')\n"
        "b.scopemem_register_providers(register=r.register)\n"
        "for name in r.names():\n"
        "    r.get(name)(ProviderSettings(name=name))\n"
        "print('aiohttp' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"


# --- the OpenAI-compatible client


async def test_openai_sends_one_chat_completion_and_returns_the_text(make, fake):
    fake.reply = OK_REPLY["openai"]
    provider = make("openai")
    assert isinstance(provider, Provider)
    assert await ask(provider, model="gpt-4o-mini") == OK_TEXT
    (hit,) = fake.hits
    assert (hit["method"], hit["path"], hit["query"]) == ("POST", "/v1/chat/completions", "")
    assert fake.headers["authorization"] == f"Bearer {KEY}"
    assert fake.headers["content-type"].startswith("application/json")
    assert fake.body == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "system", "content": SYSTEM},
                     {"role": "user", "content": USER}],
        "max_tokens": 1024,
    }


async def test_openai_passes_a_model_name_with_slashes_through(make, fake):
    fake.reply = OK_REPLY["openai"]
    ref = parse_model_ref("openai/meta-llama/Llama-3")
    provider = make("openai", model=ref.model)
    await ask(provider, model=ref.model, max_tokens=64)
    assert fake.body["model"] == "meta-llama/Llama-3"
    assert fake.body["max_tokens"] == 64


@pytest.mark.parametrize("key", [None, ""])
async def test_openai_without_a_key_sends_no_authorization(make, fake, key, caplog):
    caplog.set_level("DEBUG", logger="scopemem")
    fake.reply = OK_REPLY["openai"]
    provider = make("openai", key=key, base_url=fake.base + "/v1/")  # trailing slash too
    assert await ask(provider) == OK_TEXT
    assert "authorization" not in fake.headers
    assert fake.hits[0]["path"] == "/v1/chat/completions"


async def test_openai_reads_the_key_from_the_configured_variable(make, fake, pm):
    fake.reply = OK_REPLY["openai"]
    config = MemoryConfig(providers={"openai": {"base_url": fake.base + "/v1",
                                                "api_key_env": "LOCAL_LLM_KEY"}})
    provider = build_provider(pm, config, ModelRef("openai", "m"),
                              {"LOCAL_LLM_KEY": "local-key-1", "OPENAI_API_KEY": "wrong"})
    try:
        await ask(provider)
    finally:
        await provider.close()
    assert fake.headers["authorization"] == "Bearer local-key-1"


async def test_openai_refused_without_a_key_names_the_variable(make, fake):
    """A misspelt variable sends no key; the server's 401 says only that none came."""
    fake.status = 401
    fake.reply = {"error": {"message": "You didn't provide an API key."}}
    provider = make("openai", key=None, api_key_env="MY_LLM_KEY")
    with pytest.raises(ProviderError, match=r"MY_LLM_KEY is not set; "
                       r"memory\.providers\.openai\.api_key_env names it"):
        await ask(provider)


# --- the Anthropic messages client


async def test_anthropic_sends_one_message_and_joins_the_text_blocks(make, fake):
    fake.reply = OK_REPLY["anthropic"]
    provider = make("anthropic")
    assert await ask(provider, model="claude-3-5-haiku-latest") == OK_TEXT
    (hit,) = fake.hits
    assert (hit["method"], hit["path"], hit["query"]) == ("POST", "/v1/messages", "")
    headers = fake.headers
    assert headers["x-api-key"] == KEY
    assert headers["anthropic-version"] == "2023-06-01"
    assert headers["content-type"].startswith("application/json")
    assert "authorization" not in headers
    assert fake.body == {
        "model": "claude-3-5-haiku-latest",
        "max_tokens": 1024,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": USER}],
    }


@pytest.mark.parametrize("key", [None, ""])
async def test_anthropic_without_a_key_fails_before_any_request(make, fake, key):
    provider = make("anthropic", key=key)
    with pytest.raises(ProviderError, match="ANTHROPIC_API_KEY is not set"):
        await ask(provider)
    assert fake.hits == []


# --- failures, both clients


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("status", "reason"), [
    (401, "Unauthorized"), (500, "Internal Server Error")])
async def test_an_error_status_names_it_without_the_key(make, fake, kind, status, reason):
    fake.status = status
    fake.reply = {"type": "error", "error": {
        "type": "api_error", "message": f"request refused for key {KEY}: try later"}}
    provider = make(kind)
    with pytest.raises(ProviderError) as raised:
        await ask(provider)
    message = str(raised.value)
    assert f"HTTP {status} {reason}" in message
    assert "request refused for key" in message and "try later" in message
    assert KEY not in message
    assert API_PATH[kind] in message
    assert len(fake.hits) == 1  # no retry: the same request would be refused again


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("status", [429, 503])
async def test_a_busy_answer_is_retried_after_the_wait_it_asks(make, fake, kind, status):
    fake.reply = OK_REPLY[kind]
    fake.first = [(status, {"Retry-After": "0"}), (status, {"Retry-After": "0"})]
    provider = make(kind)
    assert await ask(provider) == OK_TEXT
    assert len(fake.hits) == 3


async def test_anthropics_overloaded_answer_is_retried(make, fake):
    # Anthropic says it is busy with 529 (overloaded_error), not 503.
    fake.reply = OK_REPLY["anthropic"]
    fake.first = [(529, {})]
    provider = make("anthropic")
    assert await ask(provider) == OK_TEXT
    assert len(fake.hits) == 2


@pytest.mark.parametrize("kind", KINDS)
async def test_a_busy_answer_past_the_timeout_is_the_error(make, fake, kind):
    fake.first = [(429, {"Retry-After": "120"})]
    provider = make(kind, timeout_seconds=5)
    with pytest.raises(ProviderError, match="HTTP 429"):
        await ask(provider)
    assert len(fake.hits) == 1  # the wait asked would end past the call's timeout


@pytest.mark.parametrize("kind", KINDS)
async def test_a_long_non_json_error_body_is_cut_short(make, fake, kind):
    fake.status = 502
    fake.reply = b"<html><body>" + b"bad gateway " * 200 + KEY.encode() + b"</body></html>"
    provider = make(kind)
    with pytest.raises(ProviderError) as raised:
        await ask(provider)
    message = str(raised.value)
    assert "HTTP 502" in message and "bad gateway" in message
    assert len(message) < 400
    assert KEY not in message
    assert len(fake.hits) == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_a_deeply_nested_error_body_is_still_the_status(make, fake, kind):
    fake.status = 500
    fake.reply = DEEPLY_NESTED
    provider = make(kind)
    with pytest.raises(ProviderError, match="HTTP 500"):
        await ask(provider)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_slow_server_times_out_once(make, fake, kind):
    fake.reply = OK_REPLY[kind]
    fake.hold = True
    provider = make(kind, timeout_seconds=0.2)
    started = time.monotonic()
    with pytest.raises(ProviderError, match=r"within 0\.2 s"):
        await ask(provider)
    assert time.monotonic() - started < 2
    fake.release.set()
    assert len(fake.hits) == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_an_unreachable_server_is_a_provider_error(make, kind, refused_port: int,
                                                         monkeypatch: pytest.MonkeyPatch):
    # Every attempt is made, only the waits between them are not: the refused connections
    # are retried as many times as they would be.
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def no_wait(delay: float, result: Any = None) -> Any:
        waits.append(delay)
        return await real_sleep(0, result)

    monkeypatch.setattr(asyncio, "sleep", no_wait)
    provider = make(kind, base_url=f"http://127.0.0.1:{refused_port}")
    with pytest.raises(ProviderError, match="failed") as raised:
        await ask(provider)
    assert KEY not in str(raised.value)
    assert len(waits) >= 4  # five attempts, a wait before each after the first


# Valid JSON nested past the parser's recursion limit: RecursionError, not ValueError.
DEEPLY_NESTED = b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"

MALFORMED: dict[str, list[Any]] = {
    "openai": [
        b"this is not json",
        b"",
        [1, 2],
        {},
        {"choices": []},
        {"choices": "hello"},
        {"choices": [None]},
        {"choices": [{"text": "legacy completion"}]},
        {"choices": [{"message": "hello"}]},
        {"choices": [{"message": {"role": "assistant", "content": None}}]},
        {"choices": [{"message": {"role": "assistant", "content": [{"text": "x"}]}}]},
        DEEPLY_NESTED,
    ],
    "anthropic": [
        b"<html>oops</html>",
        b"\xff\xfe\x00",
        "just a string",
        {},
        {"content": "hello"},
        {"content": []},
        {"content": [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}]},
        {"content": ["hello"]},
        {"content": [{"type": "text", "text": 5}]},
        {"content": [{"type": "text"}]},
        DEEPLY_NESTED,
    ],
}


@pytest.mark.parametrize(("kind", "reply"), [
    (kind, reply) for kind, replies in MALFORMED.items() for reply in replies])
async def test_a_malformed_reply_is_a_provider_error(make, fake, kind, reply):
    fake.reply = reply
    provider = make(kind)
    with pytest.raises(ProviderError, match=r"not JSON|unusable reply"):
        await ask(provider)
    assert len(fake.hits) == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_an_oversized_reply_is_refused(make, fake, kind, monkeypatch):
    monkeypatch.setattr(builtin_providers, "MAX_REPLY_BYTES", 64)
    fake.reply = OK_REPLY[kind]
    provider = make(kind)
    with pytest.raises(ProviderError, match="larger than 64 bytes"):
        await ask(provider)


# --- one session per provider


@pytest.mark.parametrize("kind", KINDS)
async def test_one_session_opened_lazily_and_closed_by_close(make, fake, kind):
    fake.reply = OK_REPLY[kind]
    provider = make(kind)
    assert provider._session is None  # building does no I/O
    await ask(provider)
    session = provider._session
    await ask(provider)
    assert provider._session is session and len(fake.hits) == 2
    await provider.close()
    assert session.closed
    await provider.close()  # idempotent
    with pytest.raises(ProviderError, match="closed"):
        await ask(provider)
    assert len(fake.hits) == 2


async def test_close_before_any_call_is_fine(make):
    provider = make("openai")
    await provider.close()
    assert provider._session is None


@pytest.mark.parametrize("max_tokens", [0, -1, True, 1.5])
async def test_max_tokens_must_be_a_positive_integer(make, fake, max_tokens):
    provider = make("openai")
    with pytest.raises(ValueError, match="max_tokens"):
        await ask(provider, max_tokens=max_tokens)
    assert fake.hits == []


@pytest.mark.parametrize("kind", KINDS)
async def test_an_error_body_echoing_the_urls_credentials_does_not_show_them(make, fake,
                                                                              kind):
    # A base_url's user:password@ is a secret as the key is: a server echoing what it got
    # (the password, or the Basic header it became) had it in the error message.
    fake.status = 500
    basic = base64.b64encode(b"bob:hunter2-pass").decode()
    fake.reply = {"error": {"message": f"denied hunter2-pass / Basic {basic}"}}
    base = fake.base.replace("http://", "http://bob:hunter2-pass@")
    # openai: no key (it would be the Authorization header too); anthropic: one (x-api-key).
    provider = make(kind, key=None if kind == "openai" else KEY,
                    base_url=base + ("/v1" if kind == "openai" else ""))
    with pytest.raises(ProviderError) as raised:
        await ask(provider)
    message = str(raised.value)
    assert "HTTP 500" in message and "denied" in message
    assert "hunter2" not in message and basic not in message
