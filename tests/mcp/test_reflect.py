"""``memory_reflect`` and the "Done when" of issue 17: a lesson from an agent's first MCP
session is in the context of its second, with a fake OpenAI-compatible model on loopback."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from scopemem import Memory
from tests.fake_model import FakeModel, fake_model_server, lesson
from tests.mcp.conftest import Shared, call, mcp_session, text_of

ROOT = Path(__file__).resolve().parents[2]
KEY = {"OPENAI_API_KEY": "fake-key-not-secret"}
LESSON = "the api tests need docker compose up first, else every request times out"
SESSION = [
    {"role": "user", "content": "run the api tests"},
    {"role": "assistant", "content": "they timed out until I ran docker compose up; "
                                     "then all of them passed"},
]


def docs_config(tmp_path: Path, model_url: str) -> Path:
    """The configuration docs/mcp.md gives, as written but for the data directory, the
    model (the fake one) and where its provider is."""
    docs = (ROOT / "docs" / "mcp.md").read_text()
    section = docs.split("<!-- mcp-config:start -->", 1)[1].split("<!-- mcp-config:end -->")[0]
    text = re.search(r"```toml\n(.*?)```", section, re.DOTALL).group(1)
    replaced = (text.replace('"openai/gpt-4o-mini"', '"openai/fake-model"')
                .replace('"/home/you/.local/share/scopemem"', f'"{tmp_path / "data"}"')
                .replace("[memory.providers.openai]\n",
                         f'[memory.providers.openai]\nbase_url = "{model_url}"\n'))
    assert "fake-model" in replaced and model_url in replaced and str(tmp_path) in replaced
    path = tmp_path / "from-docs.toml"
    path.write_text(replaced)
    return path


async def test_a_lesson_of_the_first_session_is_in_the_second_sessions_context(
        tmp_path: Path):
    """An agent configured from docs/mcp.md alone gets its first session's lesson in the
    context of its second."""
    with fake_model_server() as model:
        model.replies.append({"facts": [lesson(LESSON, audience="repo")],
                              "summary": "ran the api tests"})
        path = docs_config(tmp_path, model.base_url)
        async with mcp_session(path, env=KEY) as first:
            before = await call(first, "memory_context", brief="run the api tests")
            assert LESSON not in text_of(before)
            result = await call(first, "memory_reflect", transcript=SESSION, tool_calls=3)
            assert result.structured_content["scheduled"] is True, text_of(result)
            assert result.structured_content["runId"].startswith("mcp-")
        # The reflection's own process asked the model, with the session's own words, and
        # wrote the lesson (it may finish after the first server has gone).
        assert LESSON in await wait_for_lesson(path)
        [prompt] = model.prompts()
        assert "run the api tests" in prompt and "docker compose up" in prompt
        async with mcp_session(path, env=KEY) as second:
            context = await call(second, "memory_context",
                                 brief="the api tests time out, what now?")
    assert LESSON in context.structured_content["block"]
    assert "repo:acme/api" in context.structured_content["scopes"]


async def test_a_session_that_did_no_work_or_opted_out_is_not_reflected(
        config: Callable[..., Path]):
    with fake_model_server() as model:
        path = config(model_url=model.base_url)
        async with mcp_session(path) as session:
            idle = await call(session, "memory_reflect", transcript=SESSION)
            private = await call(session, "memory_reflect", tool_calls=2, transcript=[
                {"role": "user", "content": "<no-memory> rotate the prod keys"},
                {"role": "assistant", "content": "rotated"}])
            unanswered = await call(session, "memory_reflect", tool_calls=2, transcript=[
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "fix the build"}])
        assert model.requests == []
    assert idle.structured_content == {
        "scheduled": False, "reason": idle.structured_content["reason"]}
    assert "no tool calls" in idle.structured_content["reason"]
    assert private.structured_content["scheduled"] is False
    assert "<no-memory>" in private.structured_content["reason"]
    assert unanswered.is_error and "followed by the agent's answer" in text_of(unanswered)


@pytest.mark.asyncio(loop_scope="package")  # the shared server's session lives there
async def test_reflect_without_a_configured_model_is_a_clear_error(shared: Shared):
    result = await call(shared.session, "memory_reflect", transcript=SESSION, tool_calls=1)
    assert result.is_error and "memory.model" in text_of(result)


@contextmanager
def held_model() -> Iterator[tuple[FakeModel, threading.Event]]:
    """A fake model that answers the lesson once the event is set (never before)."""
    with fake_model_server() as model:
        release = threading.Event()
        answer = model.answer

        def held(body: dict[str, Any]) -> dict[str, Any]:
            release.wait(120)
            return answer(body)

        model.answer = held  # type: ignore[method-assign]
        model.replies.append({"facts": [lesson(LESSON, audience="repo")]})
        try:
            yield model, release
        finally:
            release.set()


async def wait_for_lesson(path: Path) -> list[str]:
    """The repository's lessons, once one is written (at most a minute)."""
    for _ in range(600):
        if texts := await stored_texts(path, "repo:acme/api"):
            return texts
        await asyncio.sleep(0.1)
    return []


async def test_a_signal_while_serving_still_lets_the_running_reflection_finish(
        tmp_path: Path):
    """SIGTERM (a client giving up, a person's Ctrl-C) ends the server only once the
    reflection in flight is written: the model is held until the signal has been sent."""
    with held_model() as (model, release):
        path = docs_config(tmp_path, model.base_url)
        async with mcp_session(path, env=KEY) as session:
            result = await call(session, "memory_reflect", transcript=SESSION, tool_calls=1)
            assert result.structured_content["scheduled"] is True
            log = (tmp_path / "server.log").read_text()
            pid = int(re.search(r"scopemem mcp \(pid (\d+)\)", log).group(1))
            os.kill(pid, signal.SIGTERM)
            release.set()
            assert await wait_for_lesson(path) == [LESSON]


async def stored_texts(config: Path, scope_key: str) -> list[str]:
    async with Memory.from_config(config, allow_fallback=False) as memory:
        return [record.text for record in await memory.store.list(scope_key, 10)]


async def test_a_reflection_outlives_the_client_ending_the_stdio_server(tmp_path: Path):
    """An agent calls memory_reflect as its session ends; the client then closes stdin,
    SIGTERMs the server's process group two seconds later and SIGKILLs it two seconds
    after that (the SDK's shutdown, as the MCP specification has it). A model slower than
    that lost the lesson: the reflection now runs in a process of its own."""
    with held_model() as (model, release):
        path = docs_config(tmp_path, model.base_url)
        async with mcp_session(path, env=KEY) as session:
            result = await call(session, "memory_reflect", transcript=SESSION, tool_calls=1)
            assert result.structured_content["scheduled"] is True
        release.set()  # the session is over and its server gone, killed if it lingered
        assert await wait_for_lesson(path) == [LESSON]
        assert len(model.requests) == 1
