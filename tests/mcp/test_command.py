"""``scopemem mcp`` as a command: its refusals at start (most in this process: they are
the command's checks, not the process's), the missing SDK, and a streamable HTTP smoke test
with the SDK's client."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner
from mcp import Client

from scopemem.cli.root import build_cli
from scopemem.plugins.manager import new_plugin_manager
from tests.mcp.conftest import server_env, text_of


def scopemem(config: Path, *args: str, env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scopemem", "--config", str(config), *args],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env={**os.environ, **server_env(), **(env or {})}, timeout=120)


def test_without_the_sdk_the_command_says_how_to_install_it(
        config: Callable[..., Path], tmp_path: Path):
    # A package named mcp that fails to import stands in for an environment without it.
    fake = tmp_path / "no_sdk" / "mcp"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named mcp')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(fake.parent), *sys.path])}
    path = config()
    result = scopemem(path, "mcp", env=env)
    assert result.returncode == 1
    assert "pip install -e '.[mcp]' from the scopemem checkout" in result.stderr
    assert "Traceback" not in result.stderr
    # Every other command goes on working without it.
    listed = scopemem(path, "plugins", env=env)
    assert listed.returncode == 0 and "scopemem.mcp.plugin" in listed.stdout


def test_the_command_refuses_what_it_cannot_serve(config: Callable[..., Path],
                                                    tmp_path: Path):
    def toml(name: str, text: str) -> Path:
        (tmp_path / name).write_text(text)
        return tmp_path / name

    on = '[memory]\nenabled = true\norganization = "acme"\n'
    for path, args, status, words in (
            (toml("off.toml", "[memory]\nenabled = false\n"), [], 1, "memory is off"),
            (toml("inproc.toml", on + 'store = "memory"\n'), [], 1,
             "keeps records in this process only"),
            (toml("typo.toml", on + '[memory.mcp]\nsubjet = "alice"\n'), [], 1,
             "memory.mcp: unknown key(s): subjet"),
            (config(), ["--subject", "two words"], 2, "--subject"),
            (config(), ["--drain-timeout", "nan"], 2, "--drain-timeout"),
    ):
        # In this process: a refusal missed would serve stdio on an empty input and exit 0;
        # an exception the command does not turn into its message propagates (no traceback).
        result = CliRunner().invoke(build_cli(new_plugin_manager(environ={})),
                                    ["--config", str(path), "mcp", *args],
                                    catch_exceptions=False)
        assert result.exit_code == status, result.output
        assert words in result.stderr
    # In a process of its own: a refusal missed here would serve HTTP until the timeout.
    result = scopemem(config(), "mcp", "--transport", "streamable-http", "--host", "0.0.0.0")
    assert result.returncode == 2, result.stderr
    assert "not a loopback address" in result.stderr and "Traceback" not in result.stderr


async def test_streamable_http_serves_the_same_tools_as_the_configured_identity(
        config: Callable[..., Path]):
    path = config()
    process = subprocess.Popen(
        [sys.executable, "-m", "scopemem", "--config", str(path), "mcp",
         "--transport", "streamable-http", "--port", "0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, env={**os.environ, **server_env()})
    try:
        assert process.stderr is not None
        line = ""
        while " on http://" not in line:
            line = await asyncio.wait_for(asyncio.to_thread(process.stderr.readline), 60)
            assert line, "the server exited before listening"
        url = line.rsplit(" on ", 1)[1].strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
        async with Client(url) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert "memory_context" in names and "memory_reflect" in names
            result = await client.call_tool("memory_remember", {
                "text": "lint with ruff before pushing", "scope": "me"})
            assert result.structured_content["scopeKey"] == "user:mcp:alice", \
                text_of(result)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(process.wait, 60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()


def test_reflect_of_a_file_that_is_no_handed_off_run_is_one_line(
        config: Callable[..., Path], tmp_path: Path):
    """``scopemem mcp --reflect FILE`` (a stdio server's reflection process) given a file
    that is missing or not a run says so in one line, never a traceback."""
    path = config()
    junk = tmp_path / "junk.json"
    junk.write_text('{"x": 1}')
    for given in (str(tmp_path / "missing.json"), str(junk)):
        result = subprocess.run(
            [sys.executable, "-m", "scopemem", "--config", str(path), "mcp", "--reflect",
             given], capture_output=True, text=True, env={**os.environ, **server_env()},
            timeout=60)
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert f"--reflect {given}: not a handed-off run" in result.stderr
