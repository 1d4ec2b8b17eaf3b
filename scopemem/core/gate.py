"""The write gate: keep one-moment status and change narration out of memory.

Memory is only worth its context budget if what it holds stays true in a later,
unrelated run: a failure together with its cause and remedy, a step that has to
come first, a convention of the repository.  Two shapes of candidate fact fail
that test, and this module recognises both by surface markers:

* **Status markers** pin a single moment of a single change: a pull request or
  issue as the subject of the sentence, a commit sha, a pass/fail test count, a
  delivery verdict ("is merged", "LGTM"), a CI run id or a branch name.  Such a
  line is stale as soon as the next push lands.
* **Change-description markers** narrate what one change did ("now supports",
  "was added", "unit 3", "spec row").  The diff and the spec already say that,
  and the sentence rots as the code keeps moving.

Why a function and not a line in the extractor's prompt: a model that is told
"never store pull-request state" obeys most of the time, but a store is filled by
the exceptions, and they accumulate.  A pure function answers the same way every
time, is checked marker by marker in tests, and is the single decision shared by
the write path and by any sweep over rows stored before the gate existed, so the
two can never disagree.  The gate is deliberately blunt: a real lesson that
happens to carry a marker is lost (one missing lesson, nothing else), and a
status line that carries no marker gets through (one wasted slot until newer
lessons push it out).  Neither is answered by adding a second model as a judge.

Clauses.  Several markers only count when two things co-occur "in the same
clause".  A clause here is a stretch of one line ended by ``.``, ``;``, ``!`` or
``?`` when that mark is followed by whitespace (optionally after a closing quote
or bracket) or by the end of the text.  Requiring the whitespace keeps ``v1.2``,
``10.5k``, ``engine.ts`` and URL query strings in one piece.  Every line break
also ends a clause: a stored fact is one line, so a break inside one separates
list items or distinct statements.  Commas, dashes, parentheses and colons do
*not* end a clause: a status line typically hangs its verdict off a comma or a
colon ("PR 12 was pushed, all 340 tests passing"; "Tests: 340 passing";
"#12: merged"), and splitting there would separate the number from its outcome.

All matching is case-insensitive and word-boundary aware ("snow is" is not
"now is", "unpushed" is not "pushed").  Every pattern is linear-time: gaps
between words are bounded (``\\s{1,3}``) and no quantified group can match the
same text in more than one way, so hostile input cannot trigger backtracking
blow-ups.  This module is pure: standard library only, no I/O, no state.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import Final

__all__ = [
    "CHANGE_MARKER_NAMES",
    "MARKER_NAMES",
    "STATUS_MARKER_NAMES",
    "combine_markers",
    "is_rejected",
    "rejection_markers",
]

_I: Final = re.IGNORECASE

# A marker check sees the prepared text and its clauses, and says whether it trips.
_Check = Callable[[str, Sequence[str]], bool]


# --------------------------------------------------------------------------- text prep

# Zero-width and soft-hyphen characters are invisible to a reader but would split
# a word in two for a regex ("PR\u200b1835"); model output occasionally has them.
_INVISIBLE: Final = dict.fromkeys(map(ord, "\u00ad\u180e\u200b\u200c\u200d\u2060\ufeff"))


def _prepare(text: str) -> str:
    # NFKC folds full-width letters, ligatures and no-break spaces into their plain
    # forms so the word patterns below see ordinary ASCII where a reader would.
    return unicodedata.normalize("NFKC", text).translate(_INVISIBLE)


# Zero-width split points only (look-behind + look-ahead), so splitting cannot
# backtrack over long runs of punctuation.  The punctuation stays in the clause,
# which is harmless: every marker is bounded by non-alphanumerics anyway.
_CLAUSE_BREAK: Final = re.compile(r"(?<=[.;!?])(?=\s)|(?<=[.;!?][\"'\u201d\u2019)\]])(?=\s)")


def _clauses(text: str) -> list[str]:
    clauses: list[str] = []
    for line in text.splitlines():
        clauses.extend(part for part in _CLAUSE_BREAK.split(line) if part.strip())
    return clauses


def _in_a_clause(pattern: re.Pattern[str]) -> _Check:
    """A check that trips when `pattern` occurs within any single clause."""

    def check(_text: str, clauses: Sequence[str]) -> bool:
        return any(pattern.search(clause) for clause in clauses)

    return check


# ------------------------------------------------------------------ shared fragments

# An adverb allowed between an auxiliary and its participle ("was already merged",
# "has been fully implemented").  A closed list on purpose: an open "-ly" slot
# would also admit "is only merged after two approvals", which is a convention.
_ADVERB: Final = (
    r"(?:(?:already|now|just|also|finally|successfully|fully|partially|recently)\s{1,3})?"
)

# The delivery verdicts.  Each one reports where a change stands right now, which
# is the definition of a fact that will be false tomorrow.  Kept to the forms the
# status lines actually use; "awaiting CI" is the only inflection added.
_DELIVERY_SRC: Final = (
    rf"\b(?:was|is)\s{{1,3}}{_ADVERB}(?:pushed|merged|approved)\b"
    r"|\ball[\s-]{1,3}green\b"
    r"|\blgtm\b"
    r"|\bready\s{1,3}for\s{1,3}review\b"
    r"|\bawait(?:s|ing)\s{1,3}ci\b"
    rf"|\bis\s{{1,3}}{_ADVERB}complete\b"
)


# -------------------------------------------------------------------- status markers

# pr_subject: the fact is *about* a pull request, issue or plan unit, because it
# opens with one ("PR 1835 ...", "Issue #170: ...", "#1835 ...", "pull/1835 ...").
# A number in subject position means the sentence reports on that item; the same
# reference later in the sentence is usually a citation inside a lesson and is
# left alone ("the staged rebuild (issue 170) must budget the swap").  Leading
# bullets, quotes, brackets and emphasis marks are skipped (at most 20 of them).
_OPENING_REFERENCE: Final = re.compile(
    r"[^\w#]{0,20}"
    r"(?:"
    r"(?:prs?|pull[\s-]{1,3}requests?|issues?|units?)[\s:#-]{0,3}[0-9]+\b"
    r"|#[0-9]+\b"
    r"|(?:pulls?|issues)/[0-9]+\b"
    r")",
    _I,
)


def _opens_with_reference(text: str, _clauses: Sequence[str]) -> bool:
    return _OPENING_REFERENCE.match(text) is not None


# issue_reference: a reference anywhere in the text ("#1835", ".../pull/1835",
# "issues/170", "PR 1835", "issue 170") that shares its clause with a delivery
# verdict ("the fix in #1835 was merged").  With a reference right there, the bare
# participles "pushed", "merged", "approved", "landed" and "shipped" also count:
# "pull/1835 merged at noon" is status even without an auxiliary, whereas a bare
# "merged" with no reference nearby is too common in lessons to reject on.
_REFERENCE: Final = re.compile(
    r"(?<![\w&#])#[0-9]+\b"  # '&' keeps HTML entities such as &#123; out
    r"|\b(?:pulls?|issues)/[0-9]+\b"
    r"|\b(?:prs?|pull[\s-]{1,3}requests?|issues?)[\s#-]{0,3}[0-9]+\b",
    _I,
)
_REFERENCE_DELIVERY: Final = re.compile(
    _DELIVERY_SRC + r"|\b(?:pushed|merged|approved|landed|shipped)\b", _I
)


def _reference_delivered(_text: str, clauses: Sequence[str]) -> bool:
    return any(
        _REFERENCE.search(clause) and _REFERENCE_DELIVERY.search(clause) for clause in clauses
    )


# commit_sha: a commit names one exact state of the tree.  A run of 7 to 40 hex
# characters with at least one digit and at least one letter, not touching other
# letters or digits.  The letter requirement keeps plain numbers, ids and
# timestamps out; the digit requirement keeps words such as "defaced" and
# "accede" out.  A sha that is all digits or all letters is missed, accepted as
# the price.  Underscore counts as a boundary ("build_3f9a2c1" trips); any
# Unicode letter or digit does not.  The look-aheads are bounded to 40 so each
# position costs constant time.
_COMMIT_SHA: Final = re.compile(
    r"(?<![^\W_])"
    r"(?=[0-9a-f]{0,39}[0-9])(?=[0-9a-f]{0,39}[a-f])"
    r"[0-9a-f]{7,40}"
    r"(?![^\W_])",
    _I,
)


# test_count: a count of tests or checks reported as an outcome ("all 10512 tests
# passing", "3 checks failing", "rows: 40 green").  Trips when, within one
# clause, a number sits within three words of "tests", "test cases", "checks" or
# "rows" (either side; "within three words" means the word positions differ by
# at most three) and an outcome word appears anywhere in that clause.  The
# outcome words are "pass" and "fail" in all their verb forms (pass, passes,
# passed, passing, fail, fails, failed, failing) plus "green".  Singular nouns
# ("1 test") and spelled-out numbers ("ten tests") are not counted: the noun list
# is kept to the plurals status lines use.  A number is a token starting with a
# digit and made of digits, ",", "." or "/" with an optional "k" ("10,512",
# "512/512", "10.5k"); the token boundary is a run of word characters joined by
# inner punctuation, so "10,512" stays one token.
_TOKEN: Final = re.compile(r"\w+(?:[.,/'\u2019-]\w+)*")
_NUMBER: Final = re.compile(r"[0-9][0-9,./]*k?", _I)
_COUNT_NOUNS: Final = frozenset({"tests", "checks", "rows"})
_OUTCOMES: Final = frozenset(
    {"pass", "passes", "passed", "passing", "fail", "fails", "failed", "failing", "green"}
)
_COUNT_WINDOW: Final = 3


def _clause_has_test_count(clause: str) -> bool:
    words = [match.group().lower() for match in _TOKEN.finditer(clause)]
    if _OUTCOMES.isdisjoint(words):
        return False
    numbers = {i for i, word in enumerate(words) if _NUMBER.fullmatch(word)}
    if not numbers:
        return False
    for i, word in enumerate(words):
        is_noun = word in _COUNT_NOUNS or (
            # "test cases": both words of the phrase anchor the distance, so a
            # number before the phrase and one after it are measured alike.
            (word == "cases" and i > 0 and words[i - 1] == "test")
            or (word == "test" and i + 1 < len(words) and words[i + 1] == "cases")
        )
        # A set lookup over the fixed window keeps this linear in the clause length.
        if is_noun and any(j in numbers for j in range(i - _COUNT_WINDOW, i + _COUNT_WINDOW + 1)):
            return True
    return False


def _test_count(_text: str, clauses: Sequence[str]) -> bool:
    return any(_clause_has_test_count(clause) for clause in clauses)


# delivery_predicate: a verdict on where a change stands ("was pushed", "is
# merged", "is approved", "all green", "LGTM", "ready for review", "awaits CI",
# "is complete").  Only the listed auxiliaries count: "is" and "was" (plus one
# closed-list adverb between them, see _ADVERB); "were merged" or a bare
# "merged" are too common in lessons about how merges behave.
_DELIVERY: Final = re.compile(_DELIVERY_SRC, _I)


# run_id: a CI run is one moment by definition.  "run" (or "run id"), optionally
# followed by ":" or "#", then 8 to 40 hex characters that end at a
# non-alphanumeric.  Shorter hex ("run deadbee") does not count.
_RUN_ID: Final = re.compile(
    r"\brun(?:\s{1,3}id)?[\s:#]{1,3}[0-9a-f]{8,40}(?![^\W_])",
    _I,
)


# branch_name: a working branch such as feature/repo-window belongs to one change
# and disappears with it.  "branch" (or "branch name") followed by a path-like
# name, i.e. one that contains a "/" with word characters on both sides; an
# opening quote or backtick is allowed.  Glob patterns ("release/*") and bare
# names ("the staging branch") do not count, which keeps conventions in.
_BRANCH_NAME: Final = re.compile(
    r"\bbranch(?:\s{1,3}name)?[\s:=]{1,3}[`'\"\u2018\u201c(]?\w[\w.-]{0,99}/\w",
    _I,
)


# ------------------------------------------------------------ change-description markers

# now_describes: "now" followed, directly or after one word, by a present-tense
# verb from a fixed list ("the block now renders...", "memory.md now also
# documents the sweep").  The sentence compares the code with its previous
# version, which only makes sense on the day of the change.  A comma after "now"
# breaks the pattern ("for now, pin node 20" passes).
_NOW_DESCRIBES: Final = re.compile(
    r"\bnow(?:\s{1,3}[\w'\u2019-]{1,40})?\s{1,3}"
    r"(?:documents|preserves|displays|includes|carries|has|is|supports|shows|maps"
    r"|controls|applies|uses)\b",
    _I,
)


# was_implemented: a passive report of work done ("the kind filter was added",
# "both stores have been updated").  The auxiliaries are was / were / has been /
# have been, optionally with one closed-list adverb (_ADVERB), followed by one of
# a fixed list of participles.
_WAS_IMPLEMENTED: Final = re.compile(
    rf"\b(?:was|were|has\s{{1,3}}been|have\s{{1,3}}been)\s{{1,3}}{_ADVERB}"
    r"(?:implemented|added|updated|fixed|documented|removed|renamed|introduced|extended)\b",
    _I,
)


# plan_unit: a reference to a unit of an execution plan ("unit 3", "Unit two:",
# "units 2a"), which exists only for the duration of one piece of work.  A unit id
# is a number with an optional letter suffix, or a spelled-out number from one to
# twelve; "unit tests" and "unit of work" do not count.
_PLAN_UNIT: Final = re.compile(
    r"\bunits?[\s#:-]{1,3}"
    r"(?:[0-9]+[a-z]?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)\b",
    _I,
)


# spec_row: "spec row(s)" (or "specification row") points at a line of one
# change's spec table, which is neither durable nor visible to a later run.
_SPEC_ROW: Final = re.compile(r"\bspec(?:ification)?[\s-]{1,3}rows?\b", _I)


# ------------------------------------------------------------------------- registry

_STATUS_MARKERS: Final[tuple[tuple[str, _Check], ...]] = (
    ("pr_subject", _opens_with_reference),
    ("issue_reference", _reference_delivered),
    ("commit_sha", _in_a_clause(_COMMIT_SHA)),
    ("test_count", _test_count),
    ("delivery_predicate", _in_a_clause(_DELIVERY)),
    ("run_id", _in_a_clause(_RUN_ID)),
    ("branch_name", _in_a_clause(_BRANCH_NAME)),
)

_CHANGE_MARKERS: Final[tuple[tuple[str, _Check], ...]] = (
    ("now_describes", _in_a_clause(_NOW_DESCRIBES)),
    ("was_implemented", _in_a_clause(_WAS_IMPLEMENTED)),
    ("plan_unit", _in_a_clause(_PLAN_UNIT)),
    ("spec_row", _in_a_clause(_SPEC_ROW)),
)

_MARKERS: Final = _STATUS_MARKERS + _CHANGE_MARKERS

#: Names of the markers that pin one moment of one change.
STATUS_MARKER_NAMES: Final[tuple[str, ...]] = tuple(name for name, _ in _STATUS_MARKERS)
#: Names of the markers that narrate what one change did.
CHANGE_MARKER_NAMES: Final[tuple[str, ...]] = tuple(name for name, _ in _CHANGE_MARKERS)
#: Every marker name, in the order `rejection_markers` reports them.  The names
#: are short snake_case tokens, safe to put in logs and counters.
MARKER_NAMES: Final[tuple[str, ...]] = STATUS_MARKER_NAMES + CHANGE_MARKER_NAMES


# ------------------------------------------------------------------------ public API


def rejection_markers(text: str) -> list[str]:
    """Return the names of the markers `text` trips, in `MARKER_NAMES` order.

    An empty list means the fact may be stored.  Pure and total: the answer
    depends on `text` alone, and any string (empty, huge, or unusual Unicode)
    gets an answer rather than an exception.  Empty text passes here; rejecting
    empty candidates is the caller's job.
    """
    prepared = _prepare(text)
    clauses = _clauses(prepared)
    return [name for name, trips in _MARKERS if trips(prepared, clauses)]


def is_rejected(text: str) -> bool:
    """True when `text` trips at least one marker and must not be stored."""
    return bool(rejection_markers(text))


def combine_markers(answers: Sequence[Sequence[str] | None]) -> list[str]:
    """Every plugin's markers for one candidate, in answer order, without repeats. Any
    marker at all rejects the candidate."""
    combined: dict[str, None] = {}
    for answer in answers:
        for marker in answer or ():
            combined.setdefault(str(marker), None)
    return list(combined)
