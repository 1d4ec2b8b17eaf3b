"""A scope's postings as arrays, so a retrieval weighs every gated record in a few vector steps.

``core.topk`` weighs records one at a time in Python: under realistic text a brief lets in
nearly every record of a large scope, and the answer needs about a fifth of them weighed, a
few milliseconds of interpreter overhead. A store holding a scope's postings in memory (the
in-process store, ``shared/cache.py``'s copies) keeps a ``DenseIndex`` beside them: each
query term's holders become an array of positions among the sorted active seqs, handed to the
engine's one covered-weight sum (``ranking.covered_weights``), so every sum is bit for bit
the one every other store's records get. Weighing 10,000 gated records this way costs about
as much as ``core.topk`` weighing 200 (about 5 ns a posting).

An index describes one state of the active records: a store drops it when they change (a
use-count bump changes nothing here). The arrays are built whole before they are shared, so
reading from several threads is safe.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from scopemem.core import ranking
from scopemem.core.ranking import QueryTerms, candidate_cap

__all__ = ["DenseIndex"]

# How far below the cap-th best match a record is still kept: far above the float error of a
# match, far below any difference between two matches that matters. Keeping a few records too
# many changes no answer; rank_covered ranks them exactly.
MARGIN = 1e-9

Positions = npt.NDArray[np.intp]


class DenseIndex:
    """One state of a scope's postings (term → the seqs of the active records holding it,
    each record once), with the seqs of the records that continue their predecessor's
    thread (``continues``, as ``ranking.rank_covered`` reads it)."""

    __slots__ = ("_arrays", "_continues", "_postings", "_seqs")

    def __init__(self, postings: Mapping[str, Collection[int]], seqs: Collection[int],
                 continues: Collection[int]) -> None:
        """``seqs``: the active records'."""
        order = np.fromiter(seqs, dtype=np.int64, count=len(seqs))
        order.sort()
        self._seqs = order
        self._postings = postings
        self._arrays: dict[str, Positions] = {}
        # continues[i]: the record at position i continues the one at i - 1 (seq - 1 is
        # active, so it sits just before it in the sorted seqs).
        chained = np.zeros(len(order), dtype=bool)
        if continues and len(order):
            wanted = np.fromiter(continues, dtype=np.int64, count=len(continues))
            at = np.searchsorted(order, wanted)
            found = (at > 0) & (at < len(order))
            at, wanted = at[found], wanted[found]
            at = at[(order[at] == wanted) & (order[at - 1] == wanted - 1)]
            chained[at] = True
        self._continues = chained

    def positions(self, term: str) -> Positions | None:
        """The positions of the records holding ``term`` (None when none does), each once, in
        order: for a query term of several stems (``ranking.QueryTerms``), of those holding any."""
        found = self._arrays.get(term)
        if found is not None:
            return found
        holders = self._postings.get(term)
        if holders:
            seqs = np.fromiter(holders, dtype=np.int64, count=len(holders))
            seqs.sort()  # positions in order, as ``_shared`` reads them
            found = np.searchsorted(self._seqs, seqs).astype(np.intp, copy=False)
        elif " " in term:
            parts = [at for at in map(self.positions, term.split(" ")) if at is not None]
            if not parts:
                return None
            found = np.unique(np.concatenate(parts))
        else:
            return None
        self._arrays[term] = found
        return found

    def covered(self, terms: QueryTerms, weights: Sequence[float], limit: int | None,
                context: float) -> tuple[dict[int, float], dict[int, float]]:
        """What ``ranking.rank_covered`` takes (seq → covered weight, seq → the weight shared
        with its predecessor when ``context`` credits neighbours), for every gated record when
        ``limit`` is None, else only for those ``limit`` hits can need: every gated record
        whose match, with its predecessor's credit, reaches the ``candidate_cap``-th best
        (ties included), and their gated predecessors. The answer is exactly the one every
        gated record gives."""
        size = len(self._seqs)
        sums = ranking.covered_weights(np.zeros(size), terms, weights, self.positions)
        shared = self._shared(terms, weights) if context else None
        gated = np.zeros(size, dtype=bool)
        for term in terms.prefilter:
            at = self.positions(term)
            if at is not None:
                gated[at] = True
        chosen = np.flatnonzero(gated)
        total = float(sum(weights))
        cap = 0 if limit is None else candidate_cap(limit)
        if 0 < cap < len(chosen) and total > 0:
            chosen = self._needed(chosen, sums, shared, gated, total, cap, context)
        seqs = self._seqs[chosen].tolist()
        covered = dict(zip(seqs, sums[chosen].tolist(), strict=True))
        if shared is None:
            return covered, {}
        common = shared[chosen]
        some = np.flatnonzero(common > 0.0)
        return covered, dict(zip(self._seqs[chosen[some]].tolist(), common[some].tolist(),
                                 strict=True))

    def _shared(self, terms: QueryTerms, weights: Sequence[float]) -> npt.NDArray[np.float64]:
        """Position → the weight of the query terms both its record and the record before
        it (seq − 1) hold: ``ranking.shared_weights``'s additions, one vector step a term."""
        order = self._seqs
        # A record and the one just before it in the seqs hold a term both when their
        # positions are adjacent among its holders' (sorted); they are predecessor and
        # successor when their seqs are adjacent too.
        adjacent = np.zeros(len(order), dtype=bool)
        adjacent[1:] = order[1:] == order[:-1] + 1
        shared = np.zeros(len(order))
        for term, weight in zip(terms.terms, weights, strict=True):
            at = self.positions(term)
            if at is None or len(at) < 2:
                continue
            both = at[1:][at[1:] == at[:-1] + 1]
            both = both[adjacent[both]]
            if len(both):
                shared[both] += weight
        return shared

    def _needed(self, chosen: Positions, sums: npt.NDArray[np.float64],
                shared: npt.NDArray[np.float64] | None, gated: npt.NDArray[np.bool_],
                total: float, cap: int, context: float) -> Positions:
        """Of the gated positions ``chosen``, those whose match reaches the cap-th best
        (less ``MARGIN``), and their gated predecessors when ``context`` credits them."""
        match = sums / total
        credited = match
        if context and shared is not None:
            # As ranking._matches: the credit of a gated predecessor of the same thread
            # (its weight less the shared), the sum capped at 1.
            linked = self._continues.copy()
            linked[1:] &= gated[:-1]
            prior = np.zeros(len(match))
            prior[1:] = sums[:-1]
            credit = context * ((prior - shared) / total)
            credited = np.minimum(match + np.where(linked, credit, 0.0), 1.0)
        values = credited[chosen]
        floor = np.partition(values, len(values) - cap)[len(values) - cap]
        kept: Positions = chosen[values >= floor - MARGIN]
        if context:
            before = kept[linked[kept]] - 1
            kept = np.union1d(kept, before).astype(np.intp, copy=False)
        return kept
