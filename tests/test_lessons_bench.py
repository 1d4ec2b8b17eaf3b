"""The lessons benchmark's briefs with no target stay irrelevant by construction while they
share engineering words with the records (benchmarks/lessons_bench.py)."""

from __future__ import annotations

import importlib.util
import sys
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
    sys.modules.setdefault("lessons_bench", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("languages", [("english",), ("english", "german", "spanish")])
def test_shared_word_briefs_are_irrelevant_by_construction(
        bench: ModuleType, languages: tuple[str, ...]) -> None:
    bench.check_no_target(analyzer_for(languages))


def test_a_brief_about_a_recorded_subject_is_refused(
        bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "NO_TARGET_DEV",
                        [*bench.NO_TARGET_DEV, "the terraform deploy fails on the build step"])
    with pytest.raises(SystemExit, match="'terraform' is in a record"):
        bench.check_no_target(analyzer_for(("english",)))


def test_a_brief_without_shared_words_is_refused(
        bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "NO_TARGET_HELD_OUT",
                        [*bench.NO_TARGET_HELD_OUT, "write a haiku about autumn leaves"])
    with pytest.raises(SystemExit, match="fewer than two shared words"):
        bench.check_no_target(analyzer_for(("english",)))
