"""``scopemem hook <event>`` as Claude Code runs it: a subprocess with a recorded payload on
stdin, against real stores, a real git repository, a dead worker and a hung one."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from scopemem.agent_hooks.ledger import Ledger
from scopemem.agent_hooks.payload import MAX_PAYLOAD_BYTES
from scopemem.agent_hooks.plugin import GRACE_SECONDS
from scopemem.api.memory import Memory
from scopemem.cli.root import build_cli
from scopemem.core.records import Candidate, Kind
from scopemem.core.scoring import FENCE_CLOSE
from scopemem.plugins.manager import new_plugin_manager
from scopemem.stores.counting import read_stats
from tests.agent_hooks.claude_code import (
    Transcript,
    git_repo,
    payload,
    run_hook,
    text,
    write_config,
)

LESSON = "the integration tests need make bootstrap first"


def sqlite_config(tmp_path: Path, extra: str = "") -> Path:
    return write_config(tmp_path / "scopemem.toml", f"""
[memory]
enabled = true
organization = "acme"
store = "sqlite"
admins = ["user:cli:local"]
{extra}
[memory.stores.sqlite]
path = "{tmp_path / 'data'}"

[memory.hooks]
subject = "alice"
state_dir = "{tmp_path / 'state'}"
""")


def remember(config: Path, fact: str, *args: str) -> None:
    """A fact a person states, through the command line (the hooks never write one); in
    this process, the hooks being what runs as Claude Code runs it."""
    result = CliRunner().invoke(build_cli(new_plugin_manager(environ={})),
                                ["--config", str(config), "remember", fact, *args],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output


def context_of(result: subprocess.CompletedProcess[str], event: str) -> str:
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["hookSpecificOutput"]["hookEventName"] == event
    block: str = answer["hookSpecificOutput"]["additionalContext"]
    return block


def assert_quiet_failure(result: subprocess.CompletedProcess[str], code: int) -> None:
    """Failed the way Claude Code tolerates: never 2 (blocking), one line, no traceback."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return git_repo(tmp_path / "api")


def test_a_prompt_gets_the_block_with_the_repo_from_the_git_remote(tmp_path: Path,
                                                                    repo: Path) -> None:
    config = sqlite_config(tmp_path)
    remember(config, LESSON, "--scope", "repo", "--repo", "acme/api")
    result = run_hook(config, "UserPromptSubmit",
                      payload("UserPromptSubmit", cwd=str(repo),
                              prompt="why do the integration tests fail?"))
    block = context_of(result, "UserPromptSubmit")
    assert LESSON in block
    assert "repo:acme/api" in block and "user:claude-code:alice" in block
    assert result.stderr == ""


@pytest.mark.parametrize("encoding", ["ascii", "cp1252"])
def test_the_block_is_utf8_whatever_the_locale(tmp_path: Path, repo: Path,
                                              encoding: str) -> None:
    config = sqlite_config(tmp_path)
    fact = "the 日本語 builds need the CJK fonts installed first"
    remember(config, fact, "--scope", "org")
    result = run_hook(config, "UserPromptSubmit",
                      payload("UserPromptSubmit", cwd=str(repo), prompt="why do builds fail?"),
                      env={"PYTHONIOENCODING": encoding})
    assert fact in context_of(result, "UserPromptSubmit")
    assert result.stderr == ""


def test_session_start_gets_the_repository_window(tmp_path: Path, repo: Path) -> None:
    config = sqlite_config(tmp_path)
    remember(config, LESSON, "--scope", "repo", "--repo", "acme/api")
    block = context_of(run_hook(config, "SessionStart", payload("SessionStart", cwd=str(repo))),
                       "SessionStart")
    assert LESSON in block


def test_no_git_remote_means_no_repo_scope(tmp_path: Path) -> None:
    config = sqlite_config(tmp_path)
    remember(config, LESSON, "--scope", "repo", "--repo", "acme/api")
    remember(config, "deploys go through the release train", "--scope", "org")
    plain = git_repo(tmp_path / "scratch", remote=None)
    block = context_of(run_hook(config, "UserPromptSubmit",
                                payload("UserPromptSubmit", cwd=str(plain),
                                        prompt="how do deploys and integration tests work")),
                       "UserPromptSubmit")
    assert "release train" in block
    assert LESSON not in block and "repo:" not in block


def test_a_prompt_counts_what_it_showed_once(tmp_path: Path, repo: Path) -> None:
    config = sqlite_config(tmp_path)
    remember(config, LESSON, "--scope", "org")
    block = context_of(run_hook(config, "UserPromptSubmit",
                                payload("UserPromptSubmit", cwd=str(repo),
                                        prompt="why do the integration tests fail?")),
                       "UserPromptSubmit")
    assert LESSON in block

    async def counted() -> tuple[int, dict[str, int]]:
        async with Memory.from_config(config, allow_fallback=False) as memory:
            [record] = await memory.store.list("org:acme", 5)
            stats = await read_stats(memory.store, scope="org:acme")
        return record.use_count, stats.by("scope")["org:acme"]

    use_count, counters = asyncio.run(counted())
    assert use_count == 1 and counters.get("injected_keyword") == 1


def long_lessons(n: int) -> list[Candidate]:
    """Lessons that all match "deploy", each about 600 characters and each its own."""
    filler = " ".join(f"word{i}" for i in range(90))
    return [Candidate(kind=Kind.FACT, text=f"deploy step {i}: {filler} variant {i}",
                      source_thread_key=f"claude-code:session-{i}") for i in range(n)]


@pytest.mark.parametrize("max_chars, extra", [(9000, ""), (2000, "max_chars = 2000\n")])
def test_the_block_stays_within_the_hooks_character_budget(tmp_path: Path, repo: Path,
                                                           max_chars: int, extra: str) -> None:
    config = sqlite_config(tmp_path)
    config.write_text(config.read_text() + extra)

    async def fill() -> None:
        async with Memory.from_config(config, allow_fallback=False) as memory:
            await memory.store.write("org:acme", long_lessons(40))

    asyncio.run(fill())
    block = context_of(run_hook(config, "UserPromptSubmit",
                                payload("UserPromptSubmit", cwd=str(repo),
                                        prompt="how do I deploy?")), "UserPromptSubmit")
    # Within the budget, and filled to near it: the budget, not the records, set the length.
    assert max_chars - 700 < len(block) <= max_chars
    assert block.endswith(FENCE_CLOSE)


def test_nothing_matched_answers_nothing(tmp_path: Path, repo: Path) -> None:
    result = run_hook(sqlite_config(tmp_path), "UserPromptSubmit",
                      payload("UserPromptSubmit", cwd=str(repo)))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_memory_off_answers_nothing(tmp_path: Path, repo: Path) -> None:
    config = write_config(tmp_path / "off.toml", "[memory]\nenabled = false\n")
    for event in ("SessionStart", "UserPromptSubmit", "Stop", "SessionEnd"):
        result = run_hook(config, event, payload(event, cwd=str(repo)), cwd=tmp_path,
                          env={"XDG_STATE_HOME": str(tmp_path / "xdg")})
        assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), event
    assert not (tmp_path / "xdg").exists()


def worker_config(tmp_path: Path, port: int) -> Path:
    return write_config(tmp_path / "worker.toml", f"""
[memory]
enabled = true
organization = "acme"
store = "worker"

[memory.stores.worker]
base_url = "http://127.0.0.1:{port}"

[memory.hooks]
subject = "alice"
state_dir = "{tmp_path / 'state'}"
""")


def assert_given_up_at(result: subprocess.CompletedProcess[str], timeout: float) -> None:
    """Given up at ``timeout``: by the read's own deadline or, on a machine so busy that the
    process could not start its read in time, by the watchdog a grace later. Which of the
    two comes first is thread timing; that the deadline is the one asked for is not."""
    assert (f"memory read timed out after {timeout:g}s" in result.stderr
            or f"gave up after {timeout + GRACE_SECONDS:g}s" in result.stderr), result.stderr


@pytest.fixture
def hung_worker() -> Iterator[int]:
    """A port that accepts connections and never answers a byte."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server.getsockname()[1]


@pytest.mark.parametrize("event", ["SessionStart", "UserPromptSubmit"])
def test_a_dead_worker_costs_the_block_not_the_turn(tmp_path: Path, repo: Path, event: str,
                                                    refused_port: int) -> None:
    result = run_hook(worker_config(tmp_path, refused_port), event,
                      payload(event, cwd=str(repo)), env={"MEMORY_TOKEN": "t" * 24})
    assert_quiet_failure(result, 0)
    assert "memory read of 3 of 3 scope(s) failed" in result.stderr
    log = (tmp_path / "state" / "hooks.log").read_text()
    assert "retrieve from org:acme failed" in log


def test_a_hung_worker_is_given_up_at_the_deadline(tmp_path: Path, repo: Path,
                                                   hung_worker: int) -> None:
    result = run_hook(worker_config(tmp_path, hung_worker), "UserPromptSubmit",
                      payload("UserPromptSubmit", cwd=str(repo)), "--timeout", "0.5",
                      env={"MEMORY_TOKEN": "t" * 24})
    assert_quiet_failure(result, 0)
    assert_given_up_at(result, 0.5)


def test_the_timeout_comes_from_the_config(tmp_path: Path, repo: Path,
                                           hung_worker: int) -> None:
    config = worker_config(tmp_path, hung_worker)
    config.write_text(config.read_text() + "timeout = 0.25\n")
    result = run_hook(config, "UserPromptSubmit", payload("UserPromptSubmit", cwd=str(repo)),
                      env={"MEMORY_TOKEN": "t" * 24})
    assert_quiet_failure(result, 0)
    assert_given_up_at(result, 0.25)


@pytest.mark.parametrize("stdin", [
    "", "not json", "[]", '{"hook_event_name": "UserPromptSubmit"}',
    json.dumps(payload("Stop")), json.dumps(payload("UserPromptSubmit", prompt=7)),
])
def test_malformed_stdin_is_one_line_and_a_non_blocking_exit(tmp_path: Path, stdin: str) -> None:
    result = run_hook(sqlite_config(tmp_path), "UserPromptSubmit", stdin)
    assert_quiet_failure(result, 1)
    assert result.stderr.startswith("scopemem hook: ")


@pytest.mark.parametrize("args", [("PreToolUse",), ("UserPromptSubmit", "--timeout", "0"),
                                  ("UserPromptSubmit", "--timeout", "abc"),
                                  ("UserPromptSubmit", "--timeout", "nan"),
                                  ("UserPromptSubmit", "--bogus")])
def test_a_settings_mistake_never_blocks_the_prompt(tmp_path: Path, args: tuple[str, ...]
                                                    ) -> None:
    result = run_hook(sqlite_config(tmp_path), args[0], payload("UserPromptSubmit"), *args[1:])
    assert_quiet_failure(result, 1)


def run_hook_with_root(root: list[str], *, env: dict[str, str] | None = None,
                       event: tuple[str, ...] = ("user-prompt-submit",)
                       ) -> subprocess.CompletedProcess[str]:
    """The installed ``scopemem`` script with these root options before ``hook``."""
    script = Path(sys.executable).with_name("scopemem")
    return subprocess.run([str(script), *root, "hook", *event],
                          input=json.dumps(payload("UserPromptSubmit")), capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**os.environ, **(env or {})})


def test_a_root_option_mistake_never_blocks_the_prompt(tmp_path: Path) -> None:
    from tests.test_config import malformed_files

    mistakes = [["--confg", "x"], ["--config", str(tmp_path)], ["--config"],
                ["--config", str(tmp_path / "missing.toml")],
                *(["--config", str(path)] for path in malformed_files(tmp_path).values())]
    for root in mistakes:
        result = run_hook_with_root(root)
        assert_quiet_failure(result, 1)
        assert "scopemem hook: " in result.stderr
    result = run_hook_with_root([], env={"SCOPEMEM_CONFIG": str(tmp_path)})
    assert_quiet_failure(result, 1)
    assert "is a directory" in result.stderr
    # --config took "hook" for its value: no command is left at all.
    assert_quiet_failure(run_hook_with_root(["--config"], event=()), 1)


def test_a_config_error_is_one_line(tmp_path: Path) -> None:
    config = write_config(tmp_path / "bad.toml", "[memory]\nenabled = true\n"
                                                 'organization = "acme"\n[memory.hooks]\n'
                                                 "timeout = 99\n")
    result = run_hook(config, "UserPromptSubmit", payload("UserPromptSubmit"))
    assert_quiet_failure(result, 1)
    assert "memory.hooks.timeout" in result.stderr


@pytest.mark.parametrize("event", ["UserPromptSubmit", "Stop"])
def test_a_state_dir_that_cannot_be_used_is_named(tmp_path: Path, repo: Path,
                                                  event: str) -> None:
    config = sqlite_config(tmp_path)
    (tmp_path / "state").write_text("a file where the state directory should be\n")
    result = run_hook(config, event, payload(event, cwd=str(repo)))
    assert_quiet_failure(result, 1)
    assert f"state directory {tmp_path / 'state'} cannot be used" in result.stderr
    assert "memory.hooks.state_dir" in result.stderr


def test_a_missing_worker_token_is_named_not_fallen_back_from(tmp_path: Path, repo: Path,
                                                              refused_port: int) -> None:
    result = run_hook(worker_config(tmp_path, refused_port), "UserPromptSubmit",
                      payload("UserPromptSubmit", cwd=str(repo)), env={"MEMORY_TOKEN": ""})
    assert_quiet_failure(result, 1)
    assert "MEMORY_TOKEN" in result.stderr


def small_talk(tmp_path: Path, session_id: str) -> Transcript:
    t = Transcript(tmp_path / f"{session_id}.jsonl", session_id, tmp_path)
    t.user("hello")
    t.assistant(text("Hello! What are we working on?"))
    return t


def test_a_part_too_small_to_reflect_is_left_for_later(tmp_path: Path, repo: Path) -> None:
    config = sqlite_config(tmp_path, 'model = "openai/fake-model"\n'
                                     '[memory.providers.openai]\n'
                                     'base_url = "http://127.0.0.1:9/v1"\n')
    t = small_talk(tmp_path, "s-small")
    result = run_hook(config, "Stop", payload("Stop", session_id="s-small", cwd=str(repo),
                                              transcript_path=str(t.path)))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert Ledger(tmp_path / "state").read("s-small").claimed == 0


WITH_MODEL = ('model = "openai/fake-model"\n[memory.providers.openai]\n'
              'base_url = "http://127.0.0.1:9/v1"\n')


def test_stop_without_a_readable_transcript_is_one_line(tmp_path: Path, repo: Path) -> None:
    result = run_hook(sqlite_config(tmp_path, WITH_MODEL), "Stop",
                      payload("Stop", cwd=str(repo),
                              transcript_path=str(tmp_path / "missing.jsonl")))
    assert_quiet_failure(result, 0)
    assert "cannot read the transcript" in result.stderr


def hook_process(config: Path, event: str) -> subprocess.Popen[bytes]:
    """``scopemem hook <event>`` with its stdin a pipe the test writes, as Claude Code's."""
    from tests.agent_hooks.claude_code import REPO_ROOT

    return subprocess.Popen(
        [sys.executable, "-m", "scopemem", "--config", str(config), "hook", event],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})


def test_a_payload_whose_pipe_stays_open_is_answered(tmp_path: Path, repo: Path) -> None:
    """Claude Code does not always close a hook's stdin after the JSON (SessionEnd on
    /clear): the hook answers once the JSON is whole, not when the watchdog gives up."""
    config = sqlite_config(tmp_path)
    remember(config, LESSON, "--scope", "repo", "--repo", "acme/api")
    process = hook_process(config, "UserPromptSubmit")
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(payload("UserPromptSubmit", cwd=str(repo),
                                           prompt="why do the integration tests fail?"))
                        .encode())
    process.stdin.flush()
    try:
        out, err = process.stdout.read(), process.stderr.read() if process.stderr else b""
        assert process.wait(timeout=60) == 0
    finally:
        process.stdin.close()
    assert b"gave up" not in err, err
    assert LESSON in json.loads(out)["hookSpecificOutput"]["additionalContext"]


@pytest.mark.parametrize("enabled", [False, True])
def test_the_whole_payload_is_read_whatever_the_hook_does_with_it(tmp_path: Path,
                                                                  enabled: bool) -> None:
    """A hook that ends without reading all its input leaves Claude Code writing into a
    closed pipe (EPIPE): with memory off, and past the payload's size cap, it is read to
    the end all the same."""
    config = (sqlite_config(tmp_path) if enabled
              else write_config(tmp_path / "off.toml", "[memory]\nenabled = false\n"))
    big = json.dumps(payload("UserPromptSubmit",
                             prompt="x" * (MAX_PAYLOAD_BYTES * enabled + 1_000_000)))
    process = hook_process(config, "UserPromptSubmit")
    assert process.stdin is not None and process.stderr is not None
    # Written as Claude Code writes it (communicate() would swallow a BrokenPipeError).
    try:
        process.stdin.write(big.encode())
        process.stdin.flush()
    finally:
        process.stdin.close()
        err = process.stderr.read()
        process.wait(timeout=60)
    assert process.returncode == (1 if enabled else 0), err


def test_without_a_model_stop_says_so_and_keeps_the_part(tmp_path: Path, repo: Path) -> None:
    """Reflection needs memory.model: without one, Stop says so in a line and starts no
    reflection, and the part stays unclaimed for when a model is configured."""
    config = sqlite_config(tmp_path)
    t = Transcript(tmp_path / "s-work.jsonl", "s-work", repo)
    t.user("run the integration tests")
    t.assistant(text("Running them."), {"type": "tool_use", "id": "toolu_01", "name": "Bash",
                                        "input": {"command": "make test"}})
    t.tool_result("toolu_01", "error: run make bootstrap first", is_error=True)
    t.assistant(text("They need make bootstrap first."))
    for event in ("Stop", "SessionEnd"):
        result = run_hook(config, event, payload(event, session_id="s-work", cwd=str(repo),
                                                 transcript_path=str(t.path)))
        assert_quiet_failure(result, 0)
        assert "memory.model" in result.stderr
    assert Ledger(tmp_path / "state").read("s-work").claimed == 0
