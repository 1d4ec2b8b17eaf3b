"""Driving ``scopemem mcp`` the way an agent does: the SDK's own client, over stdio, against
a real ``python -m scopemem mcp`` subprocess on a SQLite store in a temp dir."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.server.mcpserver", reason="the MCP SDK (scopemem[mcp]) is needed")

from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.types import CallToolResult  # noqa: E402

FAKE_KEY_ENV = "FAKE_MODEL_KEY"


def write_config(tmp_path: Path, *, mcp: str = 'subject = "alice"\nrepo = "acme/api"',
                 admins: tuple[str, ...] = (), model_url: str | None = None,
                 extra: str = "") -> Path:
    admin_list = ", ".join(f'"{admin}"' for admin in admins)
    model = ""
    if model_url is not None:
        model = (f'model = "openai/fake-model"\n\n[memory.providers.openai]\n'
                 f'base_url = "{model_url}"\napi_key_env = "{FAKE_KEY_ENV}"\n')
    text = (f'[memory]\nenabled = true\norganization = "acme"\nstore = "sqlite"\n'
            f'admins = [{admin_list}]\n{extra}{model}\n'
            f'[memory.stores.sqlite]\npath = "{tmp_path / "data"}"\n\n'
            f'[memory.mcp]\n{mcp}\n')
    path = tmp_path / "scopemem.toml"
    path.write_text(text)
    return path


def server_env() -> dict[str, str]:
    """What the subprocess needs beyond the SDK's default environment: this checkout first
    on the path, and the fake model's key."""
    return {"PYTHONPATH": os.pathsep.join(sys.path), FAKE_KEY_ENV: "fake-key-not-secret"}


@asynccontextmanager
async def mcp_session(config: Path, *args: str, env: dict[str, str] | None = None
                      ) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "scopemem", "--config", str(config), "mcp", *args],
        env={**server_env(), **(env or {})}, cwd=str(config.parent))
    with (config.parent / "server.log").open("a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            yield session


@asynccontextmanager
async def held_session(config: Path) -> AsyncIterator[ClientSession]:
    """``mcp_session`` entered and left by a task of its own, so that a module's fixture may
    open it in one task and close it in another: the SDK's streams live in anyio task
    groups, which only the task that entered them may leave."""
    opened: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
    finished = asyncio.Event()

    async def hold() -> None:
        async with mcp_session(config) as session:
            opened.set_result(session)
            await finished.wait()

    holder = asyncio.create_task(hold())
    await asyncio.wait({opened, holder}, return_when=asyncio.FIRST_COMPLETED)
    if not opened.done():
        await holder  # raises why the server did not start
        raise RuntimeError("the MCP session ended before it opened")
    try:
        yield opened.result()
    finally:
        finished.set()
        await holder


async def call(session: ClientSession, tool: str, **arguments: Any) -> CallToolResult:
    result = await session.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult)
    return result


def text_of(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


@pytest.fixture
def config(tmp_path: Path) -> Callable[..., Path]:
    def make(**kwargs: Any) -> Path:
        return write_config(tmp_path, **kwargs)
    return make
