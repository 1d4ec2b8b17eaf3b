"""The lessons benchmark's briefs with no target stay irrelevant by construction while they
share engineering words with the records (benchmarks/lessons_bench.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from scopemem.languages import analyzer_for

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "lessons_bench.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lessons_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("languages", [("english",), ("english", "german", "spanish")])
def test_shared_word_briefs_are_irrelevant_by_construction(
        bench: ModuleType, languages: tuple[str, ...]) -> None:
    bench.check_no_target(analyzer_for(languages))


@pytest.mark.parametrize(("half", "brief", "reason"), [
    ("NO_TARGET_DEV", "the terraform deploy fails on the build step",
     "'terraform' is in a record"),
    ("NO_TARGET_HELD_OUT", "write a haiku about autumn leaves", "fewer than two shared words"),
])
def test_a_brief_on_a_recorded_subject_or_without_shared_words_is_refused(
        bench: ModuleType, monkeypatch: pytest.MonkeyPatch, half: str, brief: str,
        reason: str) -> None:
    monkeypatch.setattr(bench, half, [*getattr(bench, half), brief])
    with pytest.raises(SystemExit, match=reason):
        bench.check_no_target(analyzer_for(("english",)))
