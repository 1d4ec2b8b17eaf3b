"""Driving ``scopemem mcp`` the way an agent does: the SDK's own client, over stdio, against
a real ``python -m scopemem mcp`` subprocess on a SQLite store in a temp dir."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import pytest_asyncio

pytest.importorskip("mcp.server.mcpserver", reason="the MCP SDK (scopemem[mcp]) is needed")

from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.types import CallToolResult  # noqa: E402

from scopemem import Memory  # noqa: E402

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


class Shared(NamedTuple):
    """The shared server's configuration (its store, for reading and seeding) and session."""

    path: Path
    session: ClientSession


def git_folder(folder: Path, remote: str) -> None:
    """``folder`` made a git repository whose origin is ``remote``."""
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    subprocess.run(["git", "-C", str(folder), "remote", "add", "origin", remote], check=True)


@pytest_asyncio.fixture(loop_scope="package", scope="package")
async def shared_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Shared]:
    """One ``scopemem mcp`` for the package's tests, configured as alice in acme/api (a
    test using it runs on the package's event loop, where its session lives). It runs in a
    folder whose git remote names another repository (acme/web): the configured one wins."""
    folder = tmp_path_factory.mktemp("shared-mcp")
    git_folder(folder, "git@github.com:acme/web.git")
    path = write_config(folder)
    async with held_session(path) as session:
        yield Shared(path, session)


@pytest_asyncio.fixture(loop_scope="package")
async def shared(shared_server: Shared) -> Shared:
    """The shared server with its store emptied: every scope an earlier test wrote deleted,
    from this process, as another process sharing the data directory would."""
    async with Memory.from_config(shared_server.path, allow_fallback=False) as memory:
        page = await memory.store.scope_page(limit=50)
        assert page.total == len(page.rows)
        for scope in page.rows:
            await memory.store.delete_scope(scope.scope_key)
    return shared_server
