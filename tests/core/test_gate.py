"""Tests for the write gate (scopemem.core.gate).

Every marker has fixtures that trip it and near misses that must not, and a
calibration set of paraphrased lessons and status lines pins the overall split.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scopemem.core.gate import (
    CHANGE_MARKER_NAMES,
    MARKER_NAMES,
    STATUS_MARKER_NAMES,
    is_rejected,
    rejection_markers,
)

# ----------------------------------------------------------------- per-marker fixtures

TRIPS: dict[str, list[str]] = {
    "pr_subject": [
        "PR 1835 adds the repository window to the block builder",
        "pr#1835 touches the worker validator",
        "- **Pull request #1790** reorders the memory block",
        "Issue 170: the staged rebuild must budget the swap",
        "#1835 changes the sweep route",
        "pull/1835 reworks the extractor prompt",
        "Unit 3 carries the restates field",
    ],
    "issue_reference": [
        "the fix for #1770 was approved by the maintainer",
        "LGTM from the maintainer on https://github.com/o/r/pull/1835, merged",
        "the follow-up in issues/170 landed this morning",
        "yesterday PR 1835 shipped with the new window",
    ],
    "commit_sha": [
        "the deploy is pinned at abc1234",
        "reset to 3f9a2c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39 before bisecting",
        "(sha 3F9A2C1) is the last good build",
        "build_3f9a2c1 is the cached artefact",
    ],
    "test_count": [
        "all 10512 tests passing on main",
        "3 checks failing after the rebase onto main",
        "Tests: 10,512 passing",
        "the suite passed with 480 of 480 test cases",
        "green across 12 required checks",
        "rows 40/40 pass in the import fixture",
    ],
    "delivery_predicate": [
        "the lockfile change was pushed to the release train",
        "the window patch is already merged",
        "the review was approved by two maintainers",
        "CI is all green on the branch",
        "lgtm, ship it",
        "the sweep route is ready for review",
        "the branch awaits CI before the cutover",
        "the kind filter is complete",
    ],
    "run_id": [
        "run 9c2e4f1a failed on the license check",
        "see run id: deadbeef for the stack trace",
        "run #0123abcd timed out in verify",
    ],
    "branch_name": [
        "work continues on branch feature/repo-window",
        "rebased branch `fix/license-check` onto main",
        "the branch name: bot/sweep-route was force-pushed",
    ],
    "now_describes": [
        "memory.md now documents the sweep route",
        "the block builder now also preserves the advisory fence",
        "the list call now has a kind filter",
        "the worker now is the source of truth for counts",
        "the CLI now uses the shared gate",
    ],
    "was_implemented": [
        "the kind filter was added to list on every store",
        "both stores have been updated for restates",
        "the swept status has been fully implemented",
        "the counters were introduced in the reflection log line",
        "the prompt was fixed to ask for causes",
    ],
    "plan_unit": [
        "unit two adds the window and the raised budget",
        "the counters belong to unit 1",
        "this closes units 3a and 4",
    ],
    "spec_row": [
        "spec row 14 describes the restates field",
        "the spec rows for the sweep are out of date",
        "see the specification row about window size",
    ],
}

NEAR_MISSES: dict[str, list[str]] = {
    "pr_subject": [
        # A reference away from the opening is a citation inside a lesson.
        "the staged rebuild (issue 170) must budget the swap",
        "PRs against main need a changelog entry",
        "Issues with the lockfile come from a stale npm cache",
        "Unit tests must not touch the network",
        "the PR 1835 note explains why the cache key includes the lockfile hash",
        "PRE-2024 runners lack the arm64 image",
    ],
    "issue_reference": [
        "see #412 for why the cache key includes the lockfile hash",
        # Reference and bare participle sit in different clauses.
        "the cache key changed in #412; merged lockfiles must be regenerated",
        "escape the brace as &#123; merged templates otherwise break",
        "C#7 features are not merged into the analyzer config",
    ],
    "commit_sha": [
        "the patch defaced the header",
        "the workers accede to the lock",
        "job 12345678 timed out",
        "the cron fired at 2024-05-01T12:00:00Z",
        "the constant 0x1f2e3d4c is the magic header",
        "the abc123 fixture is tiny",
        "node 20 and sha256 are required",
        "the token abc1234x is a placeholder",
        # 41 hex characters is longer than any sha.
        "hash " + "a1" * 20 + "b is too long to be a commit",
    ],
    "test_count": [
        "the license check fails when nested node_modules are dropped",
        "the suite has 10512 tests",
        "tests in packages/api fail under node 18 because fetch is missing",
        "10512 tests ran. the deploy failed afterwards",
        "integration tests pass only with the stub server running",
        "1 test is flaky and fails under load",
    ],
    "delivery_predicate": [
        "unpushed commits are lost when the runner is recycled",
        "this pushed the cache over its limit",
        "a green build on main is required before tagging",
        "the merge is completed by the queue, not by the bot",
        "branches that were merged keep their lockfile drift",
        "the review is not approved until the owner signs off",
    ],
    "run_id": [
        "run `npm ci` before `npm test`",
        "run the suite with 8 workers",
        "run deadbee once more",
        "rerun flaky jobs at most twice",
        "the run 9c2e4f1ax label is a typo",
    ],
    "branch_name": [
        "the staging branch is protected",
        "branch protection on main requires two reviews",
        "never push to a branch matching release/*",
        "branch release/* is reserved for the release bot",
        "branches are cheap",
    ],
    "now_describes": [
        "snow is a problem for the outdoor runner",
        "for now, pin node 20 in the engines field",
        "the cache is now warm after the first build",
        "now that the lockfile is pinned the check is stable",
        "known issues has its own label",
    ],
    "was_implemented": [
        "the nested node_modules were dropped by the dependency store",
        "the lockfile was regenerated from scratch",
        "the hook was never added to the template",
        "an added dependency needs a lockfile update",
        "the index has been slow since the rewrite",
    ],
    "plan_unit": [
        "unit tests run before integration tests",
        "a unit of work holds one transaction",
        "the community 3 chapter is unrelated",
        "units are measured in tokens",
    ],
    "spec_row": [
        "the spec requires rows to be sorted by recency",
        "inspect rows with memory list before sweeping",
        "spectrum rows are unrelated",
    ],
}


def test_fixtures_cover_every_marker() -> None:
    assert set(TRIPS) == set(MARKER_NAMES)
    assert set(NEAR_MISSES) == set(MARKER_NAMES)


@pytest.mark.parametrize(
    ("marker", "text"),
    [(marker, text) for marker, texts in TRIPS.items() for text in texts],
)
def test_marker_trips(marker: str, text: str) -> None:
    assert marker in rejection_markers(text)


@pytest.mark.parametrize(
    ("marker", "text"),
    [(marker, text) for marker, texts in NEAR_MISSES.items() for text in texts],
)
def test_marker_near_miss(marker: str, text: str) -> None:
    assert marker not in rejection_markers(text)


# ---------------------------------------------------------------- calibration set

LESSONS: list[str] = [
    "the license check fails on a resident tree whose nested node_modules were dropped; "
    "a clean npm ci of the same commit passes; the allowlist is never the fix",
    "run `npm ci` before `npm test` or the lockfile drift check fails",
    "the staged rebuild (issue 170) must budget the swap",
    "configuration ranges for cap are 1-10000",
    "the license check false positive comes from nested node_modules loss; npm ci fixes it",
    "check:deps-drift names any tree or lockfile drift",
    "this user prefers the fix over the allowlist",
    "a run that prints nothing for 30 minutes hits the idle ending; long builds must "
    "print progress",
    "when the worker answers 429, back off for at least 2 seconds before retrying the write",
    "the e2e suite needs PLAYWRIGHT_BROWSERS_PATH=0 or it downloads browsers into $HOME "
    "and times out",
    "tests in packages/api fail under node 18 because fetch is missing; pin node 20",
    "rebase onto main before pushing; merge commits break the changelog script",
]

STATUS_LINES: list[str] = [
    "PR 1835 was pushed at sha 3f9a2c1 with all 10512 tests passing",
    "pull request 1790 is merged and all green",
    "the fix for #1770 was approved by the maintainer",
    "branch feature/repo-window awaits CI",
    "run 9c2e4f1a failed on the license check",
    "memory.md now documents the sweep route",
    "the kind filter was added to list on every store",
    "unit two adds the window and the raised budget",
    "spec row 14 now carries the restates field",
    "the check:deps-drift script is complete and ready for review",
    "12 of 14 checks failing after the rebase onto main",
    "LGTM from the maintainer on https://github.com/o/r/pull/1835, merged",
]


@pytest.mark.parametrize("text", LESSONS)
def test_lessons_pass(text: str) -> None:
    assert rejection_markers(text) == []
    assert not is_rejected(text)


@pytest.mark.parametrize("text", STATUS_LINES)
def test_status_lines_reject(text: str) -> None:
    assert rejection_markers(text) != []
    assert is_rejected(text)


def test_calibration_split_is_exact() -> None:
    candidates = LESSONS + STATUS_LINES
    kept = [text for text in candidates if not is_rejected(text)]
    rejected = [text for text in candidates if is_rejected(text)]
    assert kept == LESSONS
    assert rejected == STATUS_LINES


def test_status_line_reports_every_marker_it_carries() -> None:
    # Each of the pull-request number, the sha and the test count suffices on its own.
    assert rejection_markers("PR 1835 was pushed at sha 3f9a2c1 with all 10512 tests passing") == [
        "pr_subject",
        "issue_reference",
        "commit_sha",
        "test_count",
        "delivery_predicate",
    ]


def test_change_markers_combine() -> None:
    assert rejection_markers("spec row 14 now carries the restates field") == [
        "now_describes",
        "spec_row",
    ]


# ------------------------------------------------------------------ clause boundary


def test_semicolon_and_sentence_end_separate_count_from_outcome() -> None:
    assert "test_count" not in rejection_markers("the suite has 480 tests; the deploy failed")
    assert "test_count" not in rejection_markers("the suite has 480 tests! the deploy failed")
    assert "test_count" not in rejection_markers("the suite has 480 tests\nthe deploy failed")


def test_comma_colon_and_dash_do_not_end_a_clause() -> None:
    assert "test_count" in rejection_markers("480 tests, all passing")
    assert "test_count" in rejection_markers("tests: 480 passing")
    assert "test_count" in rejection_markers("480 tests \u2014 passing")


def test_dot_inside_a_token_does_not_end_a_clause() -> None:
    # "10.5k" and "engine.ts" keep their dots; only ". " ends a clause.
    assert "test_count" in rejection_markers("10.5k tests passing in engine.ts")
    assert "issue_reference" in rejection_markers("#12 touched engine.ts and was merged")


def test_reference_only_rejects_with_delivery_in_same_clause() -> None:
    assert rejection_markers("the cache key changed in #412") == []
    assert "issue_reference" in rejection_markers("the cache key change in #412 merged cleanly")
    assert rejection_markers("the cache key changed in #412. merged lockfiles drift") == []


# ----------------------------------------------------------------- case and Unicode


def test_case_insensitive() -> None:
    assert "delivery_predicate" in rejection_markers("THE PATCH WAS PUSHED")
    assert "pr_subject" in rejection_markers("pr 12 adds the window")
    assert "now_describes" in rejection_markers("It NOW Supports restates")


def test_unicode_lookalikes_are_normalised() -> None:
    # Full-width letters and digits, a no-break space, and a zero-width space.
    assert "pr_subject" in rejection_markers("\uff30\uff32 \uff11\uff18\uff13\uff15 adds it")
    assert "delivery_predicate" in rejection_markers("it was\u00a0merged")
    assert "pr_subject" in rejection_markers("PR\u200b1835 adds the window")


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "\n",
        "\ud800",
        "\x00",
        "#",
        "PR",
        "PR #",
        "run",
        "now",
        "\u2028\u2029",
        "\U0001f600",
    ],
)
def test_odd_inputs_answer(text: str) -> None:
    assert rejection_markers(text) == []


def test_empty_text_passes_here() -> None:
    # Empty candidates are refused upstream; the gate itself only looks for markers.
    assert rejection_markers("") == []
    assert not is_rejected("")


# ------------------------------------------------------------------ totality/speed

_ADVERSARIAL_SIZE = 200_000

ADVERSARIAL = {
    "letters": "a" * _ADVERSARIAL_SIZE,
    "hex": "1a" * (_ADVERSARIAL_SIZE // 2),
    "dots": "." * _ADVERSARIAL_SIZE + "x",
    "punctuation": "?!;." * (_ADVERSARIAL_SIZE // 4) + " ",
    "hashes": "#" * _ADVERSARIAL_SIZE,
    "digits": "1" * _ADVERSARIAL_SIZE,
    "run_gap": "run" + " " * _ADVERSARIAL_SIZE + "x",
    "run_repeat": "run " * (_ADVERSARIAL_SIZE // 4),
    "now_repeat": "now x " * (_ADVERSARIAL_SIZE // 6),
    "was_repeat": "was already " * (_ADVERSARIAL_SIZE // 12),
    "branch_path": "branch " + "a-" * (_ADVERSARIAL_SIZE // 2),
    "numbers": "1," * (_ADVERSARIAL_SIZE // 2),
    "counts": "1 tests " * (_ADVERSARIAL_SIZE // 8) + "pass",
    "tokens": "a." * (_ADVERSARIAL_SIZE // 2) + "!",
    "newlines": "\n" * _ADVERSARIAL_SIZE,
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_input_completes(name: str) -> None:
    # No timing assertion: the point is that pathological input finishes at all
    # (a backtracking blow-up would hang here) and still yields known names.
    result = rejection_markers(ADVERSARIAL[name])
    assert set(result) <= set(MARKER_NAMES)


def _assert_well_formed(result: list[str]) -> None:
    assert isinstance(result, list)
    assert len(result) == len(set(result))
    assert set(result) <= set(MARKER_NAMES)
    # Reported in the declared order, so logs and counters are stable.
    assert result == [name for name in MARKER_NAMES if name in result]


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_fuzz_never_raises(text: str) -> None:
    result = rejection_markers(text)
    _assert_well_formed(result)
    assert rejection_markers(text) == result
    assert is_rejected(text) == bool(result)


# Words drawn from the fixtures themselves, so the fuzzer recombines the exact
# tokens the markers look for, plus the separators and odd spaces around them.
_VOCABULARY = sorted(
    {
        word
        for texts in (*TRIPS.values(), *NEAR_MISSES.values())
        for t in texts
        for word in t.split()
    }
    | {".", ";", ":", ",", "\n", "\u2014", "\u00a0", "\u200b", "#", "/"}
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_VOCABULARY), max_size=30).map(" ".join))
def test_fuzz_marker_vocabulary(text: str) -> None:
    _assert_well_formed(rejection_markers(text))


# --------------------------------------------------------------------------- API


def test_marker_names_are_loggable_tokens() -> None:
    assert len(MARKER_NAMES) == len(set(MARKER_NAMES))
    assert MARKER_NAMES == STATUS_MARKER_NAMES + CHANGE_MARKER_NAMES
    for name in MARKER_NAMES:
        assert name.isascii()
        assert name.replace("_", "").isalpha()
        assert name == name.lower()


def test_marker_classes() -> None:
    assert set(STATUS_MARKER_NAMES) == {
        "pr_subject",
        "issue_reference",
        "commit_sha",
        "test_count",
        "delivery_predicate",
        "run_id",
        "branch_name",
    }
    assert set(CHANGE_MARKER_NAMES) == {"now_describes", "was_implemented", "plan_unit", "spec_row"}
