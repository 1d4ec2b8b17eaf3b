"""Done when: a lesson from a coding session's first run is in the prompt of its second, with
the hooks registered exactly as docs/coding-agents.md's settings.json snippet says, a fake
OpenAI-compatible model on loopback, and the Stop hook's background reflection."""

from __future__ import annotations

import json
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from scopemem.agent_hooks.ledger import MAX_RETRIES, Ledger, SessionState
from scopemem.agent_hooks.transcript import MAX_SLICE_BYTES
from scopemem.config import config_from_mapping
from tests.agent_hooks.claude_code import (
    GUIDE,
    Transcript,
    git_repo,
    guide_command,
    payload,
    run_guide_hook,
    text,
    tool_use,
    wait_reflected,
    write_config,
)
from tests.fake_model import FakeModel, fake_model_server, lesson

LESSON = "The integration tests fail on a fresh checkout until make bootstrap has run."
ENV = {"FAKE_MODEL_KEY": "fake-key-0123456789", "MEMORY_TOKEN": "a-token-long-enough-0123"}


@pytest.fixture
def model() -> Iterator[FakeModel]:
    with fake_model_server() as server:
        yield server


@pytest.fixture
def config(tmp_path: Path, model: FakeModel) -> Path:
    return store_config(tmp_path, model, "sqlite")


def store_config(tmp_path: Path, model: FakeModel, store: str) -> Path:
    """``config``'s settings on ``store``: "sqlite", or a worker at a port that refuses."""
    return write_config(tmp_path / "scopemem.toml", f"""
[memory]
enabled = true
organization = "acme"
store = "{store}"
model = "openai/fake-model"

[memory.stores.sqlite]
path = "{tmp_path / 'data'}"

[memory.stores.worker]
base_url = "http://127.0.0.1:1"
timeout_seconds = 1
retry_deadline_seconds = 1

[memory.providers.openai]
base_url = "{model.base_url}"
api_key_env = "FAKE_MODEL_KEY"

[memory.hooks]
subject = "alice"
state_dir = "{tmp_path / 'state'}"
""")


def first_session(tmp_path: Path, repo: Path) -> Transcript:
    t = Transcript(tmp_path / "session-1.jsonl", "session-1", repo)
    t.user("run the integration tests")
    t.assistant(text("Running them."), tool_use("toolu_01", "make test-integration"))
    t.tool_result("toolu_01", "error: database schema missing", is_error=True)
    t.assistant(tool_use("toolu_02", "make bootstrap && make test-integration"))
    t.tool_result("toolu_02", "38 passed")
    t.assistant(text("They pass once make bootstrap has run."))
    return t


def hook(config: Path, event: str, t: Transcript, **fields: str) -> str:
    result = run_guide_hook(config, event, payload(event, session_id=t.session_id, cwd=t.cwd,
                                                   transcript_path=str(t.path), **fields),
                            env=ENV)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    return result.stdout


def test_a_lesson_of_the_first_session_reaches_the_second(tmp_path: Path, config: Path,
                                                          model: FakeModel) -> None:
    repo = git_repo(tmp_path / "api")
    model.replies.append({"facts": [lesson(LESSON, audience="repo",
                                           keywords=["integration", "bootstrap"])],
                          "summary": "Ran the integration tests."})
    t = first_session(tmp_path, repo)
    assert hook(config, "UserPromptSubmit", t, prompt="run the integration tests") == ""
    assert hook(config, "Stop", t) == ""
    wait_reflected(tmp_path / "state", "session-1")

    prompts = model.prompts()
    assert len(prompts) == 1
    assert "make test-integration" in prompts[0] and "database schema missing" in prompts[0]

    second = Transcript(tmp_path / "session-2.jsonl", "session-2", repo)
    out = hook(config, "UserPromptSubmit", second,
               prompt="the integration tests fail for me, why?")
    block = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert LESSON in block and "repo:acme/api" in block
    start = json.loads(hook(config, "SessionStart", second))
    assert LESSON in start["hookSpecificOutput"]["additionalContext"]


def test_a_part_of_a_session_is_reflected_once(tmp_path: Path, config: Path,
                                               model: FakeModel) -> None:
    repo = git_repo(tmp_path / "api")
    t = first_session(tmp_path, repo)
    hook(config, "Stop", t)
    first = wait_reflected(tmp_path / "state", "session-1")
    # Stop fires again with nothing new, then the session ends: nothing is reflected twice.
    hook(config, "Stop", t)
    hook(config, "SessionEnd", t, reason="prompt_input_exit")
    assert len(model.prompts()) == 1

    t.user("now the unit tests")
    t.assistant(tool_use("toolu_03", "make test-unit"))
    t.tool_result("toolu_03", "120 passed")
    t.assistant(text("All green."))
    hook(config, "SessionEnd", t, reason="other")
    second = wait_reflected(tmp_path / "state", "session-1")
    assert second.claimed > first.claimed
    prompts = model.prompts()
    assert len(prompts) == 2
    assert "make test-unit" in prompts[1] and "make test-integration" not in prompts[1]


def test_a_failed_model_call_is_logged_not_shown(tmp_path: Path, repo_config: Path) -> None:
    repo = git_repo(tmp_path / "api")
    t = first_session(tmp_path, repo)
    assert hook(repo_config, "Stop", t) == ""
    wait_reflected(tmp_path / "state", "session-1")
    log = (tmp_path / "state" / "hooks.log").read_text()
    assert "reflection session-1@" in log and "failed" in log
    assert "Traceback" not in log


@pytest.fixture
def repo_config(tmp_path: Path, refused_port: int) -> Path:
    """Reflection pointed at a model server that is not there; its refused connections are
    retried within a second in all (``timeout_seconds``), rather than the default ten."""
    return write_config(tmp_path / "scopemem.toml", f"""
[memory]
enabled = true
organization = "acme"
store = "sqlite"
model = "openai/fake-model"

[memory.stores.sqlite]
path = "{tmp_path / 'data'}"

[memory.providers.openai]
base_url = "http://127.0.0.1:{refused_port}/v1"
api_key_env = "FAKE_MODEL_KEY"
timeout_seconds = 1

[memory.hooks]
subject = "alice"
state_dir = "{tmp_path / 'state'}"
""")


def test_the_guide_registers_every_event_and_its_config_is_valid() -> None:
    for event in ("SessionStart", "UserPromptSubmit", "Stop", "SessionEnd"):
        assert guide_command(event).endswith(f" hook {event}")
    toml_text = GUIDE.read_text().split("```toml\n", 1)[1].split("```", 1)[0]
    config = config_from_mapping(tomllib.loads(toml_text))
    assert config.enabled and config.hooks.subject == "alice" and config.hooks.timeout == 3


def test_a_no_memory_prompt_keeps_its_part_from_reflection(tmp_path: Path, config: Path,
                                                           model: FakeModel) -> None:
    repo = git_repo(tmp_path / "api")
    t = Transcript(tmp_path / "session-1.jsonl", "session-1", repo)
    t.user("<no-memory> read the customer's export and fix the parser")
    t.assistant(tool_use("toolu_01", "cat export.csv"))
    t.tool_result("toolu_01", "alice@example.com,4111 1111 1111 1111")
    t.assistant(text("Fixed the parser."))
    hook(config, "Stop", t)
    wait_reflected(tmp_path / "state", "session-1")
    assert model.prompts() == []
    assert "skipped no_memory" in (tmp_path / "state" / "hooks.log").read_text()


def test_a_no_memory_prompt_before_megabytes_of_tool_output_still_counts(
        tmp_path: Path, config: Path, model: FakeModel) -> None:
    # The hooks read only the tail of a huge part (MAX_SLICE_BYTES); the prompt that asked
    # to be kept out of memory is before that tail, and still keeps the part out.
    repo = git_repo(tmp_path / "api")
    t = Transcript(tmp_path / "session-1.jsonl", "session-1", repo)
    t.user("<no-memory> read the customer's export and fix the parser")
    for n in range(3):
        t.assistant(tool_use(f"toolu_0{n}", "cat export.csv"))
        t.tool_result(f"toolu_0{n}", "alice@example.com,4111 1111 1111 1111\n" * 90_000)
    t.assistant(text("Fixed the parser."))
    assert t.path.stat().st_size > MAX_SLICE_BYTES
    hook(config, "Stop", t)
    wait_reflected(tmp_path / "state", "session-1")
    assert model.prompts() == []
    assert "skipped no_memory" in (tmp_path / "state" / "hooks.log").read_text()


def wait_released(state_dir: Path, session_id: str, retries: int) -> SessionState:
    ledger = Ledger(state_dir)
    give_up = time.monotonic() + 60
    while (state := ledger.read(session_id)).retries < retries or state.claimed:
        assert time.monotonic() < give_up, f"the part was not released: {state}"
        time.sleep(0.05)
    return state


def test_a_part_whose_writes_found_the_store_down_is_reflected_again(
        tmp_path: Path, model: FakeModel) -> None:
    repo = git_repo(tmp_path / "api")
    t = first_session(tmp_path, repo)
    down = store_config(tmp_path, model, "worker")
    model.replies.append({"facts": [lesson(LESSON, audience="repo")]})
    hook(down, "Stop", t)
    wait_released(tmp_path / "state", "session-1", 1)
    assert len(model.prompts()) == 1
    # The store is back: the next hook reflects the part again and its lesson lands, once.
    up = store_config(tmp_path, model, "sqlite")
    model.replies.append({"facts": [lesson(LESSON, audience="repo")]})
    hook(up, "Stop", t)
    state = wait_reflected(tmp_path / "state", "session-1")
    assert state.retries == 0 and len(model.prompts()) == 2
    hook(up, "Stop", t)
    assert len(model.prompts()) == 2
    block = json.loads(hook(up, "UserPromptSubmit", t, prompt="the integration tests"))
    assert LESSON in block["hookSpecificOutput"]["additionalContext"]


def test_a_part_is_given_up_after_its_retries(tmp_path: Path, model: FakeModel) -> None:
    repo = git_repo(tmp_path / "api")
    t = first_session(tmp_path, repo)
    down = store_config(tmp_path, model, "worker")
    model.replies.extend({"facts": [lesson(LESSON, audience="repo")]}
                         for _ in range(MAX_RETRIES + 2))
    for retries in range(1, MAX_RETRIES + 1):
        hook(down, "Stop", t)
        wait_released(tmp_path / "state", "session-1", retries)
    hook(down, "Stop", t)
    state = wait_reflected(tmp_path / "state", "session-1")
    assert state.retries == 0 and len(model.prompts()) == MAX_RETRIES + 1
    log = (tmp_path / "state" / "hooks.log").read_text()
    assert log.count("given up") == 1
    hook(down, "Stop", t)  # given up: not reflected again
    assert len(model.prompts()) == MAX_RETRIES + 1
