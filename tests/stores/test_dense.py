"""The array weighing (stores.dense): every gated record weighed at once, only what the ranking
can need handed on, and the same answer as the full computation, neighbour credit, ties and
the candidate cap included."""

from __future__ import annotations

from hypothesis import given, settings

from scopemem.core import topk
from scopemem.core.ranking import SEED, QueryTerms, ScopeStats, rank_covered, term_weights
from scopemem.stores.dense import DenseIndex
from tests.core.test_topk import (
    NOW,
    SCOPE_AND_QUERY,
    WEIGHTED,
    best,
    briefs,
    held_alike,
    scope_and_query,
    zipf_scope,
)


def ranked(covered, total, limit, ranking, continues, details):
    """``rank_covered``'s answer from a weighing (weights, shared weights)."""
    return rank_covered(covered[0], total, limit, NOW, ranking, continues, details,
                        shared=covered[1])


def weigh(postings, records, terms, ranking, limit, continues):
    stats = ScopeStats(records, {term: len(postings.get(term, ())) for term in terms.terms})
    weights = term_weights(terms, stats, ranking)
    seqs = set().union(*postings.values()) if postings else set()
    index = DenseIndex(postings, seqs, continues)
    return (weights, topk.covered_all(postings, terms, weights, ranking.context_weight),
            index.covered(terms, weights, None, ranking.context_weight),
            index.covered(terms, weights, limit, ranking.context_weight))


@settings(max_examples=300, deadline=None)
@given(**SCOPE_AND_QUERY)
def test_the_array_weighing_ranks_exactly_as_the_full_one(limit, **drawn):
    postings, active, continues, details, terms, ranking = scope_and_query(**drawn)
    weights, full, every, needed = weigh(postings, active, terms, ranking, limit, continues)
    total = sum(weights)
    # Without a limit: every gated record, bit for bit the full computation's sums.
    assert every == full
    # With one: a part of them, with their own sums, from which the ranking answers the
    # same items in the same order with the same matches, from the same candidates.
    assert held_alike(needed, full)
    assert ranked(needed, total, limit, ranking, continues, details) == \
        ranked(full, total, limit, ranking, continues, details)
    context = ranking.context_weight
    assert best(needed, total, context, continues, limit) == \
        best(full, total, context, continues, limit)


def test_a_realistic_brief_hands_on_a_few_records_and_ranks_the_same():
    postings, records, continues, details, words = zipf_scope()
    handed = []
    for terms in briefs(words):
        for ranking in (WEIGHTED, SEED):
            weights, full, _every, needed = weigh(postings, records, terms, ranking, 8,
                                                  continues)
            total = sum(weights)
            assert ranked(needed, total, 8, ranking, continues, details) == \
                ranked(full, total, 8, ranking, continues, details)
            handed.append(len(needed[0]) / len(full[0]))
    handed.sort()
    assert handed[len(handed) // 2] < 0.1  # the cap (50) and ties, of some thousands


def test_ties_at_the_cap_are_all_handed_on():
    # 200 records holding exactly the same terms: every one ties at the cap, and the
    # ranking's tie rule (the newer record first) must see all of them.
    postings = {"a": set(range(1, 201)), "b": set(range(1, 201))}
    terms = QueryTerms(("a", "b"), ("a", "b"))
    for continues in (set(), set(range(2, 201))):
        _weights, full, _every, needed = weigh(postings, 200, terms, WEIGHTED, 8, continues)
        assert needed == full


def test_a_credited_neighbour_lifts_a_record_above_the_cap():
    # Records holding only a common term, one of which follows the sole holder of a heavy
    # term: its predecessor's credit puts it among the best, and both are handed on.
    postings = {"common": set(range(1, 400)), "heavy": {300}}
    terms = QueryTerms(("common", "heavy"), ("common", "heavy"))
    continues = {301}
    details = {seq: (NOW, seq) for seq in range(1, 400)}
    weights, full, _every, needed = weigh(postings, 399, terms, WEIGHTED, 1, continues)
    assert {300, 301} <= needed[0].keys()
    total = sum(weights)
    assert ranked(needed, total, 1, WEIGHTED, continues, details) == \
        ranked(full, total, 1, WEIGHTED, continues, details)


def test_a_continuation_whose_predecessor_is_not_active_gets_no_credit():
    # ``continues`` naming a record whose predecessor is gone (a caller's stale set) is
    # read as the ranking reads it: no predecessor weight to credit.
    postings = {"a": {5, 9}, "b": {9}}
    index = DenseIndex(postings, {5, 9}, {9, 5})
    terms = QueryTerms(("a", "b"), ("a", "b"))
    assert index.covered(terms, [1.0, 2.0], None, 0.5) == ({5: 1.0, 9: 3.0}, {})
    assert index.covered(terms, [1.0, 2.0], 1, 0.5) == ({5: 1.0, 9: 3.0}, {})  # the cap
