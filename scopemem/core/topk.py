"""Which records a query's ranking must weigh, read from an inverted index: exactly, and few.

A store that holds a scope as postings (term → the seqs of the active records holding it)
hands ``ranking.rank_covered`` the weight of the query terms each gated record holds, and
the weight of those it shares with its predecessor (``Covered``). Only the best
``candidate_cap(limit)`` of them by match ever reach the final score, and under realistic
text a brief's prefilter lets in nearly every record of a large scope, so weighing them all
costs most of a retrieval. ``covered`` weighs only the records that can matter,
MaxScore-style, and ``rank_covered`` answers from them *exactly* as from all of them (the
same items in the same order with bit-for-bit the same matches):

* The query's terms are taken heaviest first (then rarest first): the *essential* terms E.
  Every gated record holding an E term is weighed in full (every query term it holds,
  summed in query order from 0.0, so its float is the full computation's).
* An unweighed record holds no E term, so at most R, the weight of the terms (with
  holders) outside E; one whose predecessor is unweighed too matches at most
  ``max(1, context) · R / total`` (the terms it holds and those only its predecessor
  holds, credited at ``context`` each, are apart and all outside E). Once a lower bound
  of the cap-th best match weighed beats that bound by ``MARGIN`` (the cap rule: ties go
  to the newer record, so equality is not enough), or once ``limit`` of the records
  weighed above the bound score more than ``KEYWORD_WEIGHT · bound + RECENCY_WEIGHT``
  (the score rule: ``rank_covered`` stops its scan at the first candidate that cannot
  beat them, which is then one left out), the terms taken so far are enough; else the
  next terms join E (each step reads at least half as many postings as all before it)
  and only their new records are weighed.
* Then ``settle`` weighs the neighbours that can still matter: the gated predecessor of
  a weighed record whose match with the predecessor's credit could reach the cut, and the
  gated successor of a weighed record whose credit could lift it to the cut. Every
  record matching at least the cut is then weighed with its predecessor, so its match is
  the full computation's, and every other record, weighed or not, matches less: only
  those records and their predecessors go to ``rank_covered``.

At worst every gated record is weighed, the full computation (``covered_all``); a query
of more than ``LONG`` terms is weighed in full from the start (its cap-th match is too
small a share of its weight for any bound to beat before most records are weighed).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Container, Mapping, Sequence
from collections.abc import Set as AbstractSet

from scopemem.core import ranking
from scopemem.core.ranking import QueryTerms, candidate_cap
from scopemem.core.scoring import KEYWORD_WEIGHT, RECENCY_TAU_MS, RECENCY_WEIGHT

__all__ = ["Covered", "Postings", "covered", "covered_all"]

#: term → the seqs of the active records holding it (each record once).
Postings = Mapping[str, Collection[int]]
#: What ``ranking.rank_covered`` takes of the records weighed: seq → the weight of the
#: query terms it holds, and seq → the weight of those its predecessor holds too.
Covered = tuple[dict[int, float], dict[int, float]]

# How far the cap-th match must clear the bound: far above the float error of sums of a few
# hundred weights, far below any difference between two matches that matters.
MARGIN = 1e-9
# A term outside the prefilter with more holders than this has them gated by one set
# intersection with every gated record, not one look-up each.
SMALL = 64
# A query of more terms some record holds than this is weighed in full (see ``covered``).
LONG = 48
# After the first step, a step reads at least 1 / GROW of the postings read before it.
GROW = 2


def covered_all(postings: Postings, terms: QueryTerms, weights: Sequence[float],
                context: float) -> Covered:
    """seq → the weight of the query terms it holds (``ranking.covered_weights``), for
    every record holding a prefilter term (the records a full-text prefilter matches), and
    the weight each shares with its predecessor (``ranking.shared_weights``) when the
    ranking credits neighbours (``context``)."""
    holders: Callable[[str], Collection[int] | None]
    if len(terms.terms) == len(terms.prefilter):  # every term lets its records in
        holders = postings.get
    else:
        gated: set[int] = set()
        for term in terms.prefilter:
            gated.update(postings.get(term, ()))

        def holders(term: str) -> Collection[int] | None:
            return gated.intersection(postings.get(term, ()))
    sums = ranking.covered_weights({}, terms, weights, holders)
    shared: dict[int, float] = {}
    if context:
        columns = _columns(postings, terms)
        ranking.shared_weights(shared, terms, weights, holders, columns.get)
    return sums, shared


def _columns(postings: Postings, terms: QueryTerms) -> dict[str, AbstractSet[int]]:
    """The holders, as sets, of each query term some record holds."""
    return {term: holders if isinstance(holders, (set, frozenset)) else set(holders)
            for term in terms.terms if (holders := postings.get(term))}


def covered(postings: Postings, terms: QueryTerms, weights: Sequence[float], limit: int,
            context: float, continues: Container[int],
            details: Mapping[int, tuple[int, object]] | None = None, now: int = 0
            ) -> Covered:
    """What ``ranking.rank_covered`` takes, for enough of the gated records that it answers
    exactly as it would with all of them (``covered_all``). ``context`` is the ranking's
    neighbour credit (``Ranking.context_weight``), ``continues`` holds the seqs whose
    predecessor is an active record of the same thread, as ``rank_covered`` takes them.
    With ``details`` (seq → (last touched, item), as ``rank_covered`` reads them) and
    ``now``, the score rule may stop sooner than the cap rule; a last touch that moves on before
    ``rank_covered`` reads it (a usage bump) only raises the scores it counted on."""
    total = sum(weights)
    if limit <= 0 or total <= 0:
        return covered_all(postings, terms, weights, context)
    cap = candidate_cap(limit)
    # The holders (as sets) and weight of each query term some record holds.
    columns = _columns(postings, terms)
    held = {term: weight for term, weight in zip(terms.terms, weights, strict=True)
            if term in columns}
    # Every term some record holds, heaviest first (then rarest first): E is a prefix.
    order = sorted(held, key=lambda term: (-held[term], len(postings[term])))
    # The prefilter's lists, longest first: a gated record is found in the first looked at.
    gate = sorted((postings[term] for term in terms.prefilter if term in held), key=len,
                  reverse=True)
    if not gate or sum(map(len, gate)) <= cap or len(columns) > LONG:
        # Every gated record is a candidate; or a query so long that its cap-th match is
        # a small share of its weight, which no bound gets under before most records
        # are weighed.
        return covered_all(postings, terms, weights, context)
    # R after the first n terms of ``order`` joined E, summed with fsum (it must not come
    # out below a record's own sum), and the bound on a record holding no E term whose
    # predecessor holds none either.
    rests = [math.fsum(held[term] for term in order[n:]) for n in range(len(order) + 1)]
    bounds = [(1.0 + context) * rest / total for rest in rests]
    # Until the bound falls below 1 nothing can stop: the first step takes all those terms;
    # each next step at least half as many postings as were read before it (so a query
    # that cannot stop early takes a few steps, not one a term).
    ends = [next(n for n in range(1, len(order) + 1) if bounds[n] + MARGIN < 1.0)]
    read = sum(len(postings[term]) for term in order[:ends[0]])
    step_read = 0
    for n in range(ends[0], len(order)):
        step_read += len(postings[order[n]])
        if GROW * step_read >= read or n + 1 == len(order):
            ends.append(n + 1)
            read += step_read
            step_read = 0
    prefilter = frozenset(terms.prefilter)
    every_gated: set[int] | None = None
    weighing = _Weighing(terms, weights, columns, total, context, continues, cap, gate)
    sums = weighing.sums
    start = 0
    for end in ends:
        fresh: set[int] = set()
        for term in order[start:end]:
            holders = postings[term]
            if term in prefilter:
                fresh.update(holders)
                continue
            # Only the gated holders of a term outside the prefilter are candidates.
            if len(holders) > SMALL and every_gated is None:
                every_gated = set().union(*gate)
            if every_gated is not None:
                fresh.update(every_gated.intersection(holders))
            else:
                fresh.update(seq for seq in holders if any(seq in gated for gated in gate))
        start = end
        weighing.add(fresh - sums.keys())
        floor = weighing.floor()
        if floor > bounds[end] + MARGIN:
            # The cap rule: no record left out can reach the cap.
            cut = floor - MARGIN
        elif details is not None and weighing.scores_past(bounds[end] + MARGIN, limit,
                                                          details, now):
            # The score rule: no record left out can score among the ``limit`` best.
            cut = bounds[end] + MARGIN
        else:
            continue
        weighing.settle(cut, rests[end])
        return weighing.above(cut - MARGIN)
    return sums, weighing.shared


class _Weighing:
    """The records weighed so far: ``sums`` (seq → the weight of the query terms it holds)
    with ``shared`` (seq → the weight of the query terms it and its predecessor both hold),
    and ``best``, the ``cap`` best of them as (weight with the predecessor's credit as
    first weighed, seq), best first: a predecessor weighed later is not counted, so each
    is no more than the record's match times the query's weight."""

    __slots__ = ("best", "cap", "columns", "context", "continues", "gate", "shared", "sums",
                 "terms", "total", "weights")

    def __init__(self, terms: QueryTerms, weights: Sequence[float],
                 columns: Mapping[str, AbstractSet[int]], total: float, context: float,
                 continues: Container[int], cap: int, gate: Sequence[Collection[int]]
                 ) -> None:
        self.terms, self.weights, self.columns = terms, weights, columns
        self.total, self.cap, self.gate = total, cap, gate
        self.context, self.continues = context, continues
        self.sums: dict[int, float] = {}
        self.shared: dict[int, float] = {}
        self.best: list[tuple[float, int]] = []

    def add(self, seqs: set[int], offer: bool = True) -> None:
        """Weigh ``seqs`` (none weighed yet) in full (``ranking.covered_weights``, as
        ``covered_all`` weighs); ``offer`` them to ``best``."""
        if not seqs:
            return
        columns = self.columns
        held = {term: found for term in self.terms.terms
                if (column := columns.get(term)) and (found := seqs & column)}
        new = ranking.covered_weights({}, self.terms, self.weights, held.get)
        sums = self.sums
        sums.update(new)
        if self.context:
            ranking.shared_weights(self.shared, self.terms, self.weights, held.get, columns.get)
        if not offer:
            return
        best, cap = self.best, self.cap
        low = best[-1][0] if len(best) >= cap else -1.0
        context, continues = self.context, self.continues
        if context:
            # The credit of a predecessor weighed already: its weight beyond the shared.
            before, common = sums.get, self.shared.get
            offered = []
            for seq, weight in new.items():
                value = weight
                if seq in continues and (prior := before(seq - 1)) is not None:
                    value += context * (prior - common(seq, 0.0))
                if value > low:
                    offered.append((value, seq))
        else:
            offered = [(weight, seq) for seq, weight in new.items() if weight > low]
        offered.extend(best)
        offered.sort(reverse=True)
        del offered[cap:]
        self.best = offered

    def floor(self) -> float:
        """No more than the cap-th best match of the full computation (-1 while fewer
        than the cap are weighed)."""
        best = self.best
        return min(1.0, best[self.cap - 1][0] / self.total) if len(best) >= self.cap else -1.0

    def scores_past(self, cut: float, limit: int, details: Mapping[int, tuple[int, object]],
                    now: int) -> bool:
        """Whether ``limit`` of the records weighed that match at least ``cut`` score more
        than any record matching less than ``cut`` can (``rank_covered``'s score)."""
        best, total = self.best, self.total
        if len(best) < limit or best[limit - 1][0] < cut * total:
            return False
        exp = math.exp
        scores = []
        for value, seq in best:
            if value < cut * total:
                break
            age = now - details[seq][0]
            match = value / total
            scores.append(KEYWORD_WEIGHT * (match if match < 1.0 else 1.0)
                          + RECENCY_WEIGHT * exp(-(age if age > 0 else 0) / RECENCY_TAU_MS))
        scores.sort(reverse=True)
        return scores[limit - 1] > KEYWORD_WEIGHT * cut + RECENCY_WEIGHT + MARGIN

    def above(self, cut: float) -> Covered:
        """The records weighed that match ``cut`` or more (or might: a credit counted
        whole), with their predecessors: all ``rank_covered`` needs once every other
        record matches less than ``cut``."""
        sums, context, continues = self.sums, self.context, self.continues
        need = cut * self.total
        before = sums.get
        kept = [seq for seq, weight in sums.items()
                if weight >= need or context and seq in continues
                and weight + context * before(seq - 1, 0.0) >= need]
        chosen = {seq: sums[seq] for seq in kept}
        if not context:
            return chosen, {}
        chosen.update((seq - 1, sums[seq - 1]) for seq in kept if seq - 1 in sums)
        shared = self.shared
        return chosen, {seq: shared[seq] for seq in chosen if seq in shared}

    def settle(self, cut: float, rest: float) -> None:
        """Weigh the neighbours a record matching ``cut`` or more may have, once no
        unweighed record whose predecessor is unweighed too can (each unweighed record
        holds at most ``rest``): after it, every record matching ``cut`` or more is
        weighed with its predecessor, and every other match is below ``cut``."""
        context, continues, sums, gate = self.context, self.continues, self.sums, self.gate
        if not context:
            return
        need = cut * self.total
        # A weighed record whose predecessor is not weighed (it holds at most rest).
        own = need - context * rest
        # An unweighed record after a weighed one (it holds at most rest itself).
        credit = (need - rest) / context
        todo = set(sums)
        while todo:
            missing = {seq - 1 for seq in todo
                       if sums[seq] >= own and seq in continues and seq - 1 not in sums}
            missing.update(seq + 1 for seq in todo
                           if sums[seq] >= credit and seq + 1 in continues
                           and seq + 1 not in sums)
            todo = {seq for seq in missing if any(seq in holders for holders in gate)}
            self.add(todo, offer=False)
