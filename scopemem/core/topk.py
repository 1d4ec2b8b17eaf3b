"""Which records a query's ranking must weigh, read from an inverted index: exactly, and few.

A store that holds a scope as postings (term → the seqs of the active records holding it)
hands ``ranking.rank_covered`` the weight of the query terms each gated record holds. Only
the best ``candidate_cap(limit)`` of them by match ever reach the final score, and under
realistic text a brief's prefilter lets in nearly every record of a large scope, so weighing
them all costs most of a retrieval. ``covered`` weighs only the records that can reach the
cap, MaxScore-style, and answers *exactly* as weighing every gated record would:

* The prefilter's terms are taken heaviest first (rarest first, for equal weights): the
  *essential* terms E. Every record holding an E term is weighed in full (every query term
  it holds, summed in query order, so the floats are those of the full computation), and
  so are the gated records right after them (their match takes the neighbour credit) and,
  for the neighbour credit, the gated records right before them.
* A record that holds no E term, and whose predecessor holds none either, matches at most
  ``(1 + context) · R / total`` (R the weight of the terms with holders outside E). Once the
  cap-th best match among the records weighed exactly *exceeds* that bound (with a margin
  for float error: ties go to the newer record, so equality is not enough), no record left
  unweighed can enter the cap, and the records weighed give the same candidates in the same
  order as all of them would; else the next term joins E and only its new records are
  weighed. At worst every gated record is weighed, today's full computation.

A record weighed only as a predecessor may get a lower match here than in the full
computation (its own predecessor is not looked at); it is below the bound, so below the
cap, either way.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Container, Mapping, Sequence

from scopemem.core.ranking import QueryTerms, candidate_cap

__all__ = ["Postings", "covered", "covered_all"]

#: term → the seqs of the active records holding it (each record once).
Postings = Mapping[str, Collection[int]]

# How far the cap-th match must clear the bound: far above the float error of sums of a few
# hundred weights, far below any difference between two matches that matters.
MARGIN = 1e-9
# A term outside the prefilter with more holders than this has them gated by one set
# intersection with every gated record, not one look-up each.
SMALL = 64
# A query of more terms some record holds than this is weighed in full (see ``covered``).
LONG = 48
GROW = 2


def covered_all(postings: Postings, terms: QueryTerms, weights: Sequence[float]
                ) -> dict[int, float]:
    """seq → the weight of the query terms it holds, for every record holding a prefilter
    term (the records a full-text prefilter matches), summed in query order starting from
    0.0 (as ``ranking.covered_weight`` sums, so the floats agree)."""
    sums: dict[int, float] = {}
    get = sums.get
    if len(terms.terms) == len(terms.prefilter):  # every term lets its records in
        for term, weight in zip(terms.terms, weights, strict=True):
            holders = postings.get(term)
            if not holders:
                continue
            if not sums:
                sums = dict.fromkeys(holders, 0.0 + weight)
                get = sums.get
                continue
            for seq in holders:
                sums[seq] = get(seq, 0.0) + weight
        return sums
    gated: set[int] = set()
    for term in terms.prefilter:
        gated.update(postings.get(term, ()))
    for term, weight in zip(terms.terms, weights, strict=True):
        for seq in postings.get(term, ()):
            if seq in gated:
                sums[seq] = get(seq, 0.0) + weight
    return sums


def covered(postings: Postings, terms: QueryTerms, weights: Sequence[float], limit: int,
            context: float, continues: Container[int]) -> dict[int, float]:
    """What ``ranking.rank_covered`` takes, for enough of the gated records that it answers
    exactly as it would with all of them (``covered_all``): seq → the weight of the query
    terms the record holds. ``context`` is the ranking's neighbour credit
    (``Ranking.context_weight``), ``continues`` holds the seqs whose predecessor is an
    active record of the same thread, as ``rank_covered`` takes them."""
    total = sum(weights)
    if limit <= 0 or total <= 0:
        return covered_all(postings, terms, weights)
    cap = candidate_cap(limit)
    # (holders, weight) of each query term some record holds, in query order.
    columns = [(holders if isinstance(holders, (set, frozenset)) else set(holders), weight)
               for term, weight in zip(terms.terms, weights, strict=True)
               if (holders := postings.get(term))]
    held = {term: weight for term, weight in zip(terms.terms, weights, strict=True)
            if postings.get(term)}
    # Every term some record holds, heaviest first (then rarest first): E is a prefix.
    order = sorted(held, key=lambda term: (-held[term], len(postings[term])))
    # The prefilter's lists, longest first: a gated record is found in the first looked at.
    gate = sorted((postings[term] for term in terms.prefilter if term in held), key=len,
                  reverse=True)
    if not gate or sum(map(len, gate)) <= cap or len(columns) > LONG:
        # Every gated record is a candidate; or a query so long that its cap-th match is
        # a small share of its weight, which no bound gets under before most records
        # are weighed.
        return covered_all(postings, terms, weights)
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
    weighing = _Weighing(columns, total, context, continues, cap)
    sums = weighing.sums
    # Past half the postings the full computation reads, weigh every gated record at once.
    budget = sum(len(holders) for holders, _weight in columns) * 1000
    start = 0
    for end in ends:
        if weighing.spent > budget:
            if every_gated is None:
                every_gated = set().union(*gate)
            weighing.add(every_gated - sums.keys(), offer=False)
            break
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
        if weighing.floor() > bounds[end] + MARGIN:
            weighing.settle(rests[end], gate)
            break
    return sums


class _Weighing:
    """The records weighed so far: ``sums`` (seq → the weight of the query terms it holds)
    and ``best``, the ``cap`` best of their weights with their predecessor's credit as
    they were first weighed (a predecessor weighed later is not counted: each no more than
    the record's match times the query's weight), best first."""

    __slots__ = ("best", "cap", "columns", "context", "continues", "spent", "sums", "total")

    def __init__(self, columns: Sequence[tuple[set[int], float]], total: float,
                 context: float, continues: Container[int], cap: int) -> None:
        self.columns, self.total, self.cap = columns, total, cap
        self.context, self.continues = context, continues
        self.sums: dict[int, float] = {}
        self.best: list[float] = []
        # How many postings the set intersections of ``add`` have read so far, at most.
        self.spent = 0

    def add(self, seqs: set[int], offer: bool = True) -> None:
        """Weigh ``seqs`` (none weighed yet) in full, summed in query order from 0.0 as
        ``covered_all`` sums; ``offer`` their credited weights to ``best``."""
        if not seqs:
            return
        new: dict[int, float] = {}
        get = new.get
        size = len(seqs)
        for holders, weight in self.columns:
            self.spent += min(size, len(holders))
            for seq in seqs & holders:
                new[seq] = get(seq, 0.0) + weight
        sums = self.sums
        sums.update(new)
        if not offer:
            return
        context, continues = self.context, self.continues
        if context:
            before = sums.get
            offered = [weight + context * before(seq - 1, 0.0) if seq in continues else weight
                       for seq, weight in new.items()]
        else:
            offered = list(new.values())
        offered.extend(self.best)
        offered.sort(reverse=True)
        del offered[self.cap:]
        self.best = offered

    def floor(self) -> float:
        """No more than the cap-th best match of the full computation (-1 while fewer
        than the cap are weighed)."""
        best = self.best
        return min(1.0, best[self.cap - 1] / self.total) if len(best) >= self.cap else -1.0

    def settle(self, rest: float, gate: Sequence[Collection[int]]) -> None:
        """Weigh the neighbours the cap can still need, once no unweighed record whose
        predecessor is unweighed too can reach it (each unweighed record holds at most
        ``rest``; ``gate`` the prefilter's posting lists)."""
        context, continues, sums = self.context, self.continues, self.sums
        if not context:
            return
        while True:
            # What a record's own weight plus its predecessor's credit must reach to tie
            # the cap-th best match (or a lower match: ``floor``), less the margin.
            need = (self.floor() - MARGIN) * self.total
            # A weighed record whose predecessor is not weighed (it holds at most rest).
            own = need - context * rest
            missing = {seq - 1 for seq, weight in sums.items()
                       if weight >= own and seq in continues and seq - 1 not in sums}
            # An unweighed record after a weighed one (it holds at most rest itself).
            credit = (need - rest) / context
            missing.update(seq + 1 for seq, weight in sums.items()
                           if weight >= credit and seq + 1 in continues
                           and seq + 1 not in sums)
            todo = {seq for seq in missing if any(seq in holders for holders in gate)}
            if not todo:
                return
            self.add(todo, offer=False)
