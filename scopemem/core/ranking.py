"""How a query ranks a scope's records: the one read algorithm every store runs.

A query becomes terms (``query_terms``): its folded words, function words dropped, stemmed
(``words.Analyzer``). A word that several configured languages stem differently is one term
standing for all its stems: a record holds it when it holds any of them. A record is a
candidate when it holds one of the query's prefilter terms (the relevance gate). Its keyword
match is the share of the query's *weight* it holds:

    match = Σ w(t) over query terms t the record holds  /  Σ w(t) over all query terms
    w(t) = idf(t) / uses(t),   idf(t) = ln(1 + (N − df(t) + ½) / (df(t) + ½))

with N the scope's active records, df(t) how many of them hold t and uses(t) how many times
the query uses t, so a rare word counts for more than a common one, a word a pasted log
repeats on every routine line for less than the line that matters, and the match stays in
[0, 1] (records of different scopes compare like with like). A record also takes
``CONTEXT_WEIGHT`` (0.75) of the weight of the query terms held by the record written just
before it in the same thread and not by itself, when that one is a candidate too: a reply
is found through the question it answers, a lesson through its neighbour from the same run,
and a term the two both hold counts once.

    match = (Σ w(t) over t it holds + 0.75 · Σ w(t) over t only its predecessor holds)
            / Σ w(t) over all query terms

so the match stays at most 1. The best ``candidate_cap(limit)`` candidates by match (ties
to the newer record) are then ordered by the seed's score,
``0.7 · match + 0.3 · recency``, ties to the newer record.

``Ranking(weighted=False)`` is the seed's scorer: every term weighs 1 (the match is the
plain share of the query's words), no neighbour credit, and with the ``PLAIN`` analyzer no
function word is dropped and nothing is stemmed.

Every store hands these functions the rows they ask for and the scope's statistics
(``ScopeStats``), so every store answers a query with the same ids in the same order. A
store reads the postings of the query's stems (``QueryTerms.stems``) and ``grouped`` makes
them the postings of its terms. A record's covered weight (the numerator of its match) has
one implementation, ``covered_weights``: every store's records are weighed by it, whether a
store hands in whole rows (``rank_entries``), postings (``core.topk``, which selects only
the records that can rank, exactly as all of them do) or postings as arrays
(``stores.dense``); so has the weight of the query terms a record shares with its
predecessor (``shared_weights``), which the neighbour credit leaves out.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections import Counter
from collections.abc import Callable, Collection, Container, Iterable, Mapping, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, TypeVar, cast, overload

import attrs

from scopemem.core.records import MAX_QUERY_CHARS
from scopemem.core.scoring import KEYWORD_WEIGHT, RECENCY_TAU_MS, RECENCY_WEIGHT
from scopemem.core.words import PLAIN, Analyzer

if TYPE_CHECKING:  # the array form of the sums (stores.dense); nothing here imports numpy
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]
    IntArray = npt.NDArray[np.intp]

__all__ = [
    "CONTEXT_WEIGHT",
    "SEED",
    "QueryTerms",
    "Ranking",
    "ScopeStats",
    "candidate_cap",
    "covered_weights",
    "grouped",
    "query_terms",
    "query_words",
    "rank_candidates",
    "rank_covered",
    "rank_entries",
    "score_candidates",
    "shared_weights",
    "term_weights",
    "wire_query",
]

# The FTS prefilter's terms: at most 24 distinct query terms, words before numbers and the
# longer first. Longer words are the selective ones, and a pasted log's numbers (times,
# durations, line numbers) are the least; a 4000-character query would otherwise become an
# OR of hundreds of terms. The relevance gate is the same on every store: a record
# qualifies when it holds a prefilter term; the keyword match reads every term of the query.
MAX_MATCH_TOKENS = 24
# How many gated candidates reach the final score: every match in a small scope,
# proportionally more for larger limits (000's prefilter cap).
CANDIDATE_FLOOR = 50
CANDIDATES_PER_LIMIT = 5
#: The share of the weight of the query terms the preceding same-thread record holds, and
#: the record does not, that the record is credited with (at most 1: the match stays in
#: [0, 1]).
CONTEXT_WEIGHT = 0.75

T = TypeVar("T")


@attrs.frozen
class Ranking:
    """How a store ranks: the analyzer that makes words terms, and whether terms are
    weighed by their rarity in the scope (``False`` is the seed's plain share)."""

    analyzer: Analyzer = PLAIN
    weighted: bool = True

    @property
    def context_weight(self) -> float:
        return CONTEXT_WEIGHT if self.weighted else 0.0


#: The seed's ranking: plain share of the query's words, no stemming, no stopwords.
SEED = Ranking(PLAIN, weighted=False)


@attrs.frozen
class ScopeStats:
    """What weighing needs of a scope: its active records, and for each query term how
    many of them hold it (a term missing here is held by none)."""

    records: int
    frequency: Mapping[str, int]


def _stems_of(terms: tuple[str, ...]) -> tuple[str, ...]:
    """The stems ``terms`` stand for, each once: ``terms`` itself when each is one stem."""
    if not any(" " in term for term in terms):
        return terms
    return tuple(dict.fromkeys(stem for term in terms for stem in term.split(" ")))


@attrs.frozen
class QueryTerms:
    """A query as ranking reads it. ``terms`` are its content words' terms, each once (what
    the match weighs); ``prefilter`` at most 24 of them, words before numbers and the longer
    first (what the gate and a full-text prefilter match by; all of them for a query of at
    most 24 terms); ``uses`` how many times the query uses each term, in ``terms`` order
    (a term weighs ``1 / uses`` of its rarity: ``term_weights``).

    A term is a word's stem, or, for a word the configured languages of its script stem
    differently, its stems space-joined (no stem holds a space): a record holds such a term
    when it holds any of them. ``stems`` and ``prefilter_stems`` are the stems the terms
    and the prefilter terms stand for, each once: what a store reads postings of."""

    terms: tuple[str, ...]
    prefilter: tuple[str, ...]
    uses: tuple[int, ...] = attrs.field(
        default=attrs.Factory(lambda self: (1,) * len(self.terms), takes_self=True))
    stems: tuple[str, ...] = attrs.field(
        eq=False, default=attrs.Factory(lambda self: _stems_of(self.terms), takes_self=True))
    prefilter_stems: tuple[str, ...] = attrs.field(
        eq=False,
        default=attrs.Factory(lambda self: _stems_of(self.prefilter), takes_self=True))


def query_words(query: str, analyzer: Analyzer = PLAIN) -> list[str]:
    """The query's distinct folded content words, first appearance first.

    A query means the same on every store whatever its length: when these words,
    space-joined, would not fit the wire's ``MAX_QUERY_CHARS``, only the longest that fit
    are kept (ties to the earlier), still in first-appearance order. ``wire_query`` sends
    exactly these words, which every store reads back as themselves."""
    return _fitting(analyzer.content_words(query))


def _fitting(words: list[str]) -> list[str]:
    """``words``, or the longest of them that fit in ``MAX_QUERY_CHARS`` space-joined."""
    if sum(map(len, words)) + len(words) - 1 <= MAX_QUERY_CHARS:
        return words
    kept: set[int] = set()
    used = -1  # n words take n - 1 separating spaces
    for index in sorted(range(len(words)), key=lambda i: (-len(words[i]), i)):
        cost = len(words[index]) + 1
        if used + cost <= MAX_QUERY_CHARS:
            kept.add(index)
            used += cost
    return [word for index, word in enumerate(words) if index in kept]


#: What the wire cannot carry (NUL; a lone surrogate, which UTF-8 cannot encode), and every
#: analyzer reads as a space: made one.
_UNSENDABLE = dict.fromkeys([0, *range(0xD800, 0xE000)], " ")


def wire_query(query: str, analyzer: Analyzer = PLAIN) -> str:
    """``query`` in a form the wire accepts (at most ``MAX_QUERY_CHARS`` characters, no NUL
    character nor lone surrogate) that a store ranking with ``analyzer`` reads exactly as it
    reads ``query``: the query itself when it fits (a NUL or a lone surrogate, which separate
    words as a space does, made a space), else its ``query_words`` space-joined."""
    if len(query) <= MAX_QUERY_CHARS:
        return query.translate(_UNSENDABLE)
    return " ".join(query_words(query, analyzer))


def query_terms(query: str, analyzer: Analyzer = PLAIN) -> QueryTerms:
    tokens = analyzer.content_tokens(query)
    words = _fitting(list(dict.fromkeys(tokens)))  # query_words, from one tokenizing
    term_of = {word: " ".join(analyzer.stems(word)) for word in words}
    terms = list(dict.fromkeys(term_of.values()))
    # How many times the query uses each term: a pasted log repeats its routine words on
    # every line and says the line that matters once. A query longer than the wire takes
    # is read as its distinct words (``wire_query``), so each of those is used once.
    counts = Counter(tokens) if len(query) <= MAX_QUERY_CHARS else Counter(words)
    uses = dict.fromkeys(terms, 0)
    for word, term in term_of.items():
        uses[term] += counts[word]
    # A term's length is its longest stem's.
    lengths = [max(map(len, term.split(" "))) if " " in term else len(term) for term in terms]
    ranked = sorted(range(len(terms)),
                    key=lambda index: (terms[index].isdigit(), -lengths[index], index))
    return QueryTerms(terms=tuple(terms),
                      prefilter=tuple(terms[index] for index in ranked[:MAX_MATCH_TOKENS]),
                      uses=tuple(uses.values()))


def grouped(postings: Mapping[str, Collection[int]], terms: QueryTerms
            ) -> Mapping[str, Collection[int]]:
    """The postings of ``terms`` (term → the records holding it) from the postings of its
    stems: a term of several stems is held by each record holding any of them, once.
    ``postings`` itself when every term is one stem."""
    if terms.stems is terms.terms:
        return postings
    held: dict[str, Collection[int]] = {}
    for term in terms.terms:
        holders = (set().union(*(postings.get(stem, ()) for stem in term.split(" ")))
                   if " " in term else postings.get(term))
        if holders:
            held[term] = holders
    return held


def candidate_cap(limit: int) -> int:
    return max(CANDIDATE_FLOOR, CANDIDATES_PER_LIMIT * limit)


def idf(records: int, frequency: int) -> float:
    """A term's weight in a scope of ``records`` records ``frequency`` of which hold it:
    bm25's smoothed inverse document frequency, positive even for a term every record
    holds."""
    return math.log(1.0 + (records - frequency + 0.5) / (frequency + 0.5))


def term_weights(terms: QueryTerms, stats: ScopeStats | None, ranking: Ranking
                 ) -> list[float]:
    """Each query term's weight, in ``terms.terms`` order: its idf in the scope over the
    times the query uses it (a word a pasted log repeats on every routine line weighs
    little beside the line that matters), or 1 under the seed's ranking (``stats`` may then
    be None)."""
    if not ranking.weighted or stats is None:
        return [1.0] * len(terms.terms)
    frequency = stats.frequency
    return [idf(stats.records, frequency.get(term, 0)) / uses
            for term, uses in zip(terms.terms, terms.uses, strict=True)]


@overload
def covered_weights(sums: dict[int, float], terms: QueryTerms, weights: Sequence[float],
                    holders: Callable[[str], Collection[int] | None]) -> dict[int, float]: ...


@overload
def covered_weights(sums: FloatArray, terms: QueryTerms, weights: Sequence[float],
                    holders: Callable[[str], IntArray | None]) -> FloatArray: ...


def covered_weights(sums: dict[int, float] | FloatArray, terms: QueryTerms,
                    weights: Sequence[float],
                    holders: Callable[[str], Collection[int] | None]
                    | Callable[[str], IntArray | None]) -> dict[int, float] | FloatArray:
    """The covered weight, the one sum of every ranking and every store: each record's sum
    of the weights of the query terms it holds, added to ``sums`` and returned.

    Each query term's weight is added to the sum of every record holding it
    (``holders(term)``), a term at a time in query order, a sum not begun yet beginning at
    0.0: one IEEE addition a holder, so every caller's floats agree bit for bit whichever
    records it weighs. ``sums`` is a dict (seq → sum; ``holders`` gives seqs) or a numpy
    array of zeros (``holders`` gives positions in it, each once: one vector step a term,
    ``stores.dense``)."""
    for term, weight in zip(terms.terms, weights, strict=True):
        held = holders(term)
        if held is None or not len(held):
            continue
        if not isinstance(sums, dict):  # positions (the overloads pair the two forms)
            sums[cast("IntArray", held)] += weight
        elif not sums:
            sums.update(dict.fromkeys(held, 0.0 + weight))
        else:
            # The same additions as ``sums[seq] = sums.get(seq, 0.0) + weight`` a seq, run
            # by C iterators (no bytecode a seq: most of a large weighing's time).
            order = held if isinstance(held, list) else list(held)
            sums.update(zip(order, map(operator.add, map(sums.get, order, repeat(0.0)),
                                       repeat(weight)), strict=True))
    return sums


def shared_weights(sums: dict[int, float], terms: QueryTerms, weights: Sequence[float],
                   holders: Callable[[str], Collection[int] | None],
                   column: Callable[[str], Container[int] | None]) -> dict[int, float]:
    """The weight a record shares with its predecessor: each record's sum of the weights of
    the query terms both it and the record before it (seq − 1) hold, added to ``sums`` and
    returned (a record sharing none has no entry).

    ``holders(term)`` are the records to weigh that hold ``term``; ``column(term)`` every
    record holding it that a predecessor may be. The same additions as ``covered_weights``
    (a term at a time in query order, from 0.0), so every caller's floats agree."""
    for term, weight in zip(terms.terms, weights, strict=True):
        held = holders(term)
        if not held:
            continue
        before = column(term)
        if not before:
            continue
        for seq in held:
            if seq - 1 in before:
                sums[seq] = sums.get(seq, 0.0) + weight
    return sums


def rank_entries(entries: Iterable[tuple[int, Collection[str], str, int, T]],
                 terms: QueryTerms, stats: ScopeStats | None, limit: int, now: int,
                 ranking: Ranking = SEED) -> list[tuple[T, float]]:
    """The ``limit`` best of ``entries``, best first, each with its keyword match.

    Each entry stands for one *active* record of the scope as ``(seq, terms held, thread
    key, last touched, item)``; a store may pass every active record or only those holding
    a prefilter term (the others never qualify)."""
    if not terms.terms or limit <= 0:
        return []
    weights = term_weights(terms, stats, ranking)
    gate = frozenset(terms.prefilter_stems)
    asked = frozenset(terms.stems)
    # The gated records' postings: a long brief has hundreds of terms, a record a few.
    postings: dict[str, list[int]] = {}
    threads: dict[int, str] = {}
    details: dict[int, tuple[int, T]] = {}
    for seq, held, thread, last_touched, item in entries:
        held_set = held if isinstance(held, (set, frozenset)) else frozenset(held)
        if gate.isdisjoint(held_set):
            continue
        for term in asked & held_set:
            postings.setdefault(term, []).append(seq)
        threads[seq] = thread
        details[seq] = (last_touched, item)
    held_by = grouped(postings, terms)
    covered = covered_weights({}, terms, weights, held_by.get)
    continues = {seq for seq, thread in threads.items() if threads.get(seq - 1) == thread}
    shared: dict[int, float] = {}
    if ranking.context_weight:
        columns = {term: set(seqs) for term, seqs in held_by.items()}
        shared_weights(shared, terms, weights, columns.get, columns.get)
    return rank_covered(covered, sum(weights), limit, now, ranking, continues, details,
                        shared=shared)


def rank_covered(covered: Mapping[int, float], total: float, limit: int, now: int,
                 ranking: Ranking, continues: Container[int],
                 details: Mapping[int, tuple[int, T]], *, shared: Mapping[int, float]
                 ) -> list[tuple[T, float]]:
    """The last step of every ranking, as the module docstring describes.

    ``covered`` maps the seq of each gated record to the weight of the query terms it
    holds (``covered_weights``); ``total`` is the query's whole weight. ``continues`` holds
    (at least) the seqs of the gated records whose predecessor (seq − 1) is an active record
    of the same thread; ``shared`` (at least) those records' weight shared with their
    predecessor (``shared_weights``; none under a ranking without neighbour credit).
    ``details[seq]`` is ``(last touched, item)``, read only for the records that reach the
    final score. Answers the ``limit`` best items with their match."""
    return score_candidates(rank_candidates(covered, total, limit, ranking, continues,
                                            shared=shared),
                            limit, now, details)


def rank_candidates(covered: Mapping[int, float], total: float, limit: int,
                    ranking: Ranking, continues: Container[int], *,
                    shared: Mapping[int, float]) -> list[tuple[float, int]]:
    """``rank_covered``'s first half: (match, seq) of the best ``candidate_cap(limit)``
    records by match, best first (ties to the newer record). A store that keeps the
    records' details on a server reads just these seqs' details, then scores them with
    ``score_candidates``: the same answer as ``rank_covered``."""
    if limit <= 0 or not covered or total <= 0:
        return []
    return _candidates(_matches(covered, total, ranking.context_weight, continues, shared),
                       limit)


def score_candidates(candidates: Sequence[tuple[float, int]], limit: int, now: int,
                     details: Mapping[int, tuple[int, T]]) -> list[tuple[T, float]]:
    """``rank_covered``'s second half: the ``limit`` best of ``rank_candidates``'s answer by
    the final score, best first, each with its match. ``details[seq]`` is ``(last touched,
    item)``, read only for the candidates that can still reach the final score."""
    if limit <= 0:
        return []
    exp = math.exp
    scored: list[tuple[float, int, float, T]] = []
    push, replace = heapq.heappush, heapq.heapreplace
    for value, seq in candidates:
        # Scores are kept negated in a heap of the ``limit`` best, worst at the top.
        if len(scored) == limit and -(KEYWORD_WEIGHT * value + RECENCY_WEIGHT) > \
                -scored[0][0]:
            break
        last_touched, item = details[seq]
        age = now - last_touched
        # ``score_of``, unrolled: this runs for every candidate of every retrieval.
        score = (KEYWORD_WEIGHT * value
                 + RECENCY_WEIGHT * exp(-(age if age > 0 else 0) / RECENCY_TAU_MS))
        entry = (score, seq, value, item)
        if len(scored) < limit:
            push(scored, entry)
        elif (score, seq) > scored[0][:2]:
            replace(scored, entry)
    # Best score first, the newer record (higher seq) first among equals; the items are
    # never compared (seqs are unique).
    scored.sort(key=_score_then_seq, reverse=True)
    return [(item, value) for _score, _seq, value, item in scored]


def _candidates(matched: Mapping[int, float], limit: int) -> list[tuple[float, int]]:
    """(match, seq) of the candidates best match first (ties to the newer record): at most
    the cap of them. Going down that order, a candidate whose best possible score (recency
    1) cannot beat the ``limit``-th score found so far ends ``rank_covered``'s scan; so does
    the cap."""
    cap = candidate_cap(limit)
    if len(matched) > cap:
        # A large scope: the cap-th best match from the sorted floats (C speed), then
        # tuples for only the few at or above it.
        threshold = sorted(matched.values(), reverse=True)[cap - 1]
        candidates = sorted(((value, seq) for seq, value in matched.items()
                             if value >= threshold), reverse=True)
        del candidates[cap:]
        return candidates
    return sorted(zip(matched.values(), matched.keys(), strict=True), reverse=True)


def _matches(covered: Mapping[int, float], total: float, context: float,
             continues: Container[int], shared: Mapping[int, float]) -> dict[int, float]:
    """seq → match of every gated record: its share of the query's weight, plus ``context``
    times the share of the query's weight its predecessor holds and it does not, when the
    predecessor is a gated record of the same thread, capped at 1 (float error). The one
    place the match is computed."""
    matched = {seq: weight / total for seq, weight in covered.items()}
    if context:
        get, common = covered.get, shared.get
        for seq in covered.keys() & continues:  # type: ignore[operator]
            before = get(seq - 1)
            if before is not None:
                value = matched[seq] + context * ((before - common(seq, 0.0)) / total)
                matched[seq] = value if value < 1.0 else 1.0
    return matched


_score_then_seq = operator.itemgetter(0, 1)
