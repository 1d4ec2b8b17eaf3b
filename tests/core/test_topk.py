"""The pruned candidate weighing (core.topk): it weighs fewer records than the full
computation and ranks exactly as it does, neighbour credit, ties and the cap included."""

from __future__ import annotations

import bisect
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from scopemem.core import topk
from scopemem.core.ranking import (
    SEED,
    QueryTerms,
    Ranking,
    ScopeStats,
    _matches,
    candidate_cap,
    rank_covered,
    term_weights,
)

WEIGHTED = Ranking(weighted=True)
NOW = 1_790_000_000_000


def scope(rng: random.Random, records: int, vocabulary: int, gaps: float, threads: int):
    """Postings over ``records`` seqs (a share ``gaps`` of them inactive), each term held
    with a Zipf-like probability (so a few are common, most rare, and many records hold
    the same terms: ties), records in runs of the same thread; and what ranking takes of
    the records: ``continues`` and ``details``."""
    active = [seq for seq in range(1, records + 1) if rng.random() >= gaps]
    postings: dict[str, set[int]] = {}
    thread: dict[int, int] = {}
    current = 0
    for seq in active:
        if rng.random() < 0.3:
            current = rng.randrange(threads)
        thread[seq] = current
        for rank in range(vocabulary):
            if rng.random() < 0.9 / (rank + 1) ** rng.choice((0.7, 1.0, 1.3)):
                postings.setdefault(f"t{rank}", set()).add(seq)
    continues = {seq for seq in active if thread.get(seq - 1) == thread[seq]}
    # Few distinct ages (equal scores, so the seq decides): all new (the score rule then
    # prunes most), new and a day old, or old.
    ages = rng.choice(((0,), (0, 1, 60_000, 86_400_000), (0, 30 * 86_400_000),
                       (86_400_000, 200 * 86_400_000)))
    details = {seq: (NOW - rng.choice(ages), f"r{seq}") for seq in active}
    return postings, len(active), continues, details


def query(rng: random.Random, vocabulary: int, size: int, prefilter: int) -> QueryTerms:
    """Terms of the scope's vocabulary and a few no record holds, in a random order; the
    prefilter a subset of them (a query longer than the prefilter) or all."""
    words = rng.sample([f"t{rank}" for rank in range(vocabulary)], min(size, vocabulary))
    words += [f"absent{n}" for n in range(rng.randrange(3))]
    rng.shuffle(words)
    gate = words if prefilter >= len(words) else rng.sample(words, prefilter)
    return QueryTerms(tuple(words), tuple(gate))


def both(postings, records, terms, limit, ranking, continues, details, scored=True):
    """The full weighing, the pruned one (with the score rule when ``scored``), the query's
    weight, and what ``rank_covered`` answers from each."""
    stats = ScopeStats(records, {term: len(postings.get(term, ())) for term in terms.terms})
    weights = term_weights(terms, stats, ranking)
    full = topk.covered_all(postings, terms, weights, ranking.context_weight)
    pruned = topk.covered(postings, terms, weights, limit, ranking.context_weight, continues,
                          details if scored else None, NOW)
    total = sum(weights)
    return full, pruned, total, [
        rank_covered(covered, total, limit, NOW, ranking, continues, details, shared=shared)
        for covered, shared in (full, pruned)]


def held_alike(part, whole):
    """Every weight (and shared weight) of ``part`` is bit for bit ``whole``'s."""
    return all(whole[0][seq] == weight for seq, weight in part[0].items()) and \
        all(whole[1][seq] == weight for seq, weight in part[1].items())


def best(covered, total, context, continues, limit):
    matched = _matches(covered[0], total, context, continues, covered[1])
    return sorted(((value, seq) for seq, value in matched.items()),
                  reverse=True)[:candidate_cap(limit)]


def scope_and_query(seed, records, vocabulary, size, prefilter, weighted, gaps, threads):
    """A scope, a query of it and a ranking from what ``SCOPE_AND_QUERY`` draws: postings,
    active records, continues, details, the query's terms, the ranking."""
    rng = random.Random(seed)
    postings, active, continues, details = scope(rng, records, vocabulary, gaps, threads)
    return (postings, active, continues, details, query(rng, vocabulary, size, prefilter),
            WEIGHTED if weighted else SEED)


#: A random scope and query (``scope_and_query``) and a limit, for ``@given``.
SCOPE_AND_QUERY = {
    "seed": st.integers(0, 2**32 - 1), "records": st.sampled_from((0, 3, 40, 120, 400, 900)),
    "vocabulary": st.integers(1, 40), "size": st.integers(1, 30),
    "prefilter": st.integers(1, 30), "limit": st.integers(1, 20),
    "weighted": st.booleans(), "gaps": st.sampled_from((0.0, 0.1, 0.5)),
    "threads": st.sampled_from((1, 2, 5))}


@settings(max_examples=300, deadline=None)
@given(**SCOPE_AND_QUERY)
def test_the_pruned_weighing_ranks_exactly_as_the_full_one(limit, **drawn):
    postings, active, continues, details, terms, ranking = scope_and_query(**drawn)
    context = ranking.context_weight
    # The cap rule alone: the same candidates in the same order, bit-for-bit the same
    # matches.
    full, pruned, total, (expected, got) = both(postings, active, terms, limit, ranking,
                                                continues, details, scored=False)
    assert got == expected
    assert best(pruned, total, context, continues, limit) == \
        best(full, total, context, continues, limit)
    assert held_alike(pruned, full)
    # With the score rule: the same answer, from the same leading candidates.
    full, pruned, total, (expected, got) = both(postings, active, terms, limit, ranking,
                                                continues, details)
    assert got == expected
    assert held_alike(pruned, full)
    leading = 0
    for ours, theirs in zip(best(pruned, total, context, continues, limit),
                            best(full, total, context, continues, limit), strict=False):
        if ours != theirs:
            break
        leading += 1
    answered = {item for item, _match in expected}
    assert answered <= {details[seq][1] for _value, seq in
                        best(full, total, context, continues, limit)[:leading]}


def zipf_scope(records: int = 3000, seed: int = 7):
    rng = random.Random(seed)
    vocabulary = [f"w{rank}" for rank in range(2000)]
    cumulative, top = [], 0.0
    for rank in range(1, len(vocabulary) + 1):
        top += 1 / rank ** 1.07
        cumulative.append(top)

    def words(n: int) -> list[str]:
        return [vocabulary[min(bisect.bisect(cumulative, rng.random() * top),
                               len(vocabulary) - 1)] for _ in range(n)]

    postings: dict[str, set[int]] = {}
    for seq in range(1, records + 1):
        for word in set(words(rng.randint(8, 40))):
            postings.setdefault(word, set()).add(seq)
    # One thread throughout: every record continues its predecessor.
    continues = set(range(2, records + 1))
    details = {seq: (NOW, f"r{seq}") for seq in range(1, records + 1)}
    return postings, records, continues, details, words


def briefs(words, count: int = 40):
    """``count`` seeded briefs of 5-20 of ``zipf_scope``'s words, as query terms."""
    for brief in range(count):
        distinct = tuple(dict.fromkeys(words(random.Random(brief).randint(5, 20))))
        yield QueryTerms(distinct, distinct)


def test_a_realistic_brief_weighs_a_fraction_of_the_scope_and_ranks_the_same():
    postings, records, continues, details, words = zipf_scope()
    fractions = []
    for terms in briefs(words):
        for ranking in (WEIGHTED, SEED):
            full, pruned, _total, (expected, got) = both(postings, records, terms, 8,
                                                         ranking, continues, details)
            assert got == expected
            if ranking is WEIGHTED:
                fractions.append(len(pruned[0]) / len(full[0]))
    fractions.sort()
    assert fractions[len(fractions) // 2] < 0.5


def test_neighbour_credit_from_a_record_outside_the_essential_terms_is_counted():
    # A rare term held by many records, and records whose only merit is the predecessor
    # that holds the heaviest term: their credit must be weighed, not bounded away.
    postings = {"rare": {seq for seq in range(1, 200, 2)}, "common": set(range(1, 400)),
                "heavy": {300, 302}}
    continues = set(range(2, 400))
    details = {seq: (NOW, seq) for seq in range(1, 400)}
    terms = QueryTerms(("common", "rare", "heavy"), ("common", "rare", "heavy"))
    for limit in (1, 8, 20):
        _full, _pruned, _total, (expected, got) = both(postings, 399, terms, limit,
                                                       WEIGHTED, continues, details)
        assert got == expected
