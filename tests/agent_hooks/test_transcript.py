"""Reading a real transcript file in Claude Code's JSONL shape: the conversation, the tool
calls counted once each, and nothing from lines that are not the conversation."""

from __future__ import annotations

from pathlib import Path

from scopemem.agent_hooks.transcript import (
    MAX_LINE_BYTES,
    opted_out_between,
    read_slice,
    split_run,
)
from tests.agent_hooks.claude_code import Transcript, text, tool_use


def session(tmp_path: Path) -> Transcript:
    t = Transcript(tmp_path / "s.jsonl", "s-1", tmp_path)
    t.user("run the integration tests")
    t.assistant(text("Running them."), tool_use("toolu_01", "make test-integration"),
                message_id="msg_a")
    t.tool_result("toolu_01", "error: database not initialised", is_error=True)
    t.assistant(tool_use("toolu_02", "make bootstrap"), tool_use("toolu_03", "make test"),
                message_id="msg_b")
    t.tool_result("toolu_02", "ok")
    t.tool_result("toolu_03", "42 passed")
    t.assistant(text("They need make bootstrap first."), message_id="msg_c")
    return t


def test_turns_and_tool_calls(tmp_path: Path) -> None:
    t = session(tmp_path)
    piece = read_slice(str(t.path))
    assert piece.tool_calls == 3
    roles = [turn.role for turn in piece.turns]
    assert roles == ["user", "assistant", "tool call", "tool error", "tool call", "tool call",
                     "tool", "tool", "assistant"]
    assert piece.end == t.path.stat().st_size


def test_a_block_repeated_on_another_line_is_one_call(tmp_path: Path) -> None:
    t = session(tmp_path)
    t.assistant(tool_use("toolu_03", "make test"), message_id="msg_b")
    assert read_slice(str(t.path)).tool_calls == 3


def test_lines_outside_the_conversation_are_skipped(tmp_path: Path) -> None:
    t = Transcript(tmp_path / "s.jsonl", "s-1", tmp_path)
    t.raw('{"type":"summary","summary":"Integration tests","leafUuid":"x"}\n')
    t.raw('{"type":"user","isSidechain":true,"message":{"role":"user","content":"sub"}}\n')
    t.raw('{"type":"user","isMeta":true,"message":{"role":"user","content":"caveat"}}\n')
    t.raw("this is not json\n")
    t.raw('["a list"]\n')
    t.raw('{"type":"assistant","message":"not an object"}\n')
    t.raw('{"type":"assistant","message":{"content":[1, null, {"type":"image"}]}}\n')
    t.user("the real prompt")
    piece = read_slice(str(t.path))
    assert [turn.content for turn in piece.turns] == ["the real prompt"]
    assert piece.tool_calls == 0


def test_an_unfinished_last_line_waits_for_the_next_read(tmp_path: Path) -> None:
    t = session(tmp_path)
    complete = t.path.stat().st_size
    t.raw('{"type":"user","message":{"role":"user","content":"half')
    piece = read_slice(str(t.path))
    assert piece.end == complete
    t.raw(' written"}}\n')
    later = read_slice(str(t.path), piece.end)
    assert [turn.content for turn in later.turns] == ["half written"]


def test_reading_from_an_offset_reads_only_what_came_after(tmp_path: Path) -> None:
    t = session(tmp_path)
    first = read_slice(str(t.path))
    t.user("and the unit tests?")
    t.assistant(text("Those need nothing."))
    second = read_slice(str(t.path), first.end)
    assert [turn.content for turn in second.turns] == ["and the unit tests?",
                                                      "Those need nothing."]
    assert second.tool_calls == 0
    assert read_slice(str(t.path), second.end).empty


def test_a_replaced_file_is_read_from_the_start(tmp_path: Path) -> None:
    t = session(tmp_path)
    end = read_slice(str(t.path)).end
    t.path.write_text("")
    t.user("new")
    assert [turn.content for turn in read_slice(str(t.path), end).turns] == ["new"]


def test_a_huge_slice_keeps_its_tail(tmp_path: Path) -> None:
    t = session(tmp_path)
    t.user("last prompt")
    piece = read_slice(str(t.path), 0, max_bytes=600)
    assert [turn.content for turn in piece.turns] == ["last prompt"]


def test_the_run_is_the_last_prompt_and_what_followed(tmp_path: Path) -> None:
    t = Transcript(tmp_path / "s.jsonl", "s-1", tmp_path)
    t.user("first question")
    t.assistant(text("first answer"))
    t.user("run the integration tests")
    t.assistant(tool_use("toolu_01", "make test-integration"))
    t.tool_result("toolu_01", "error: database not initialised", is_error=True)
    t.assistant(text("They need make bootstrap first."))
    history, request, answer = split_run(read_slice(str(t.path)).turns)
    assert [turn.content for turn in history] == ["first question", "first answer"]
    assert request == "run the integration tests"
    assert answer.splitlines() == [
        '[tool call] Bash {"command": "make test-integration", "description": "Run it"}',
        "[tool error] error: database not initialised",
        "They need make bootstrap first."]


def test_a_no_memory_marker_before_the_tail_is_found(tmp_path: Path) -> None:
    t = Transcript(tmp_path / "s.jsonl", "s-1", tmp_path)
    t.user("first question")
    clean = t.path.stat().st_size
    t.user("<No-Memory> look at the export")
    marked = t.path.stat().st_size
    t.raw('{"type": "user", "message": {"content": "' + "x" * (MAX_LINE_BYTES + 10)
          + ' <no-memory>"}}\n')
    assert not opted_out_between(str(t.path), 0, clean)
    assert opted_out_between(str(t.path), 0, marked)
    assert opted_out_between(str(t.path), marked, t.path.stat().st_size)
