"""The one nearest-vector search every store runs, and the SQL stores' copies of the matrices
it searches.

A scope's vectors of one model are a matrix, one row per record in seq order (``seqs``),
and a search is numpy brute force over it: one product per row, then the best few rows.
About 0.6 ms for 10,000 vectors of 384 dimensions on one core, whatever else the machine
does: the product is numpy's own loop (``einsum``), not a BLAS call, whose threads wait on
each other on a busy machine (the same product measured 12 ms with two cores loaded).
Only the best ``limit`` rows are sorted (``np.partition`` finds the ``limit``-th best
cosine), and only the chosen rows become ids.

``Matrices`` is what makes a SQL store's search cost the same: reading a 10,000-record
scope's vectors from the database (15 MB at 384 dimensions) costs tens of milliseconds
(SQLite) to hundreds (PostgreSQL) a search, so each worker keeps the last matrices it read,
each with the scope's change counter (``scopes.generation``) it was read at. Every
transaction that changes which vectors a scope holds moves that counter on: a write or a
forget that retires records (their vectors go with them), deleting the scope, and putting
vectors (``put_vectors``). A search reads the counter first, in the snapshot it reads the
chosen records in, and answers from a copy only when its counter is that one; otherwise it
reads the vectors and keeps them in place of the copy. So no search answers from vectors
another worker's change replaced. The copies are bounded (``MATRIX_BYTES``), the least
recently searched going first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from scopemem.core.records import Record
from scopemem.core.scopes import memory_id
from scopemem.errors import StoreError, StoreRefused

if TYPE_CHECKING:  # numpy loads with the first vector, not with the stores' modules
    import numpy as np
    import numpy.typing as npt

    Vector = npt.NDArray[np.float32]
    Seqs = npt.NDArray[np.int64]

__all__ = ["MATRIX_BYTES", "Matrices", "answered", "nearest", "stacked"]

#: Bytes of matrices a SQL store keeps across its scopes: four 10,000-record scopes of 384
#: dimensions (4 × 384 bytes a record). A matrix larger than this is read every search.
MATRIX_BYTES = 64 * 1024 * 1024


def stacked(scope_key: str, rows: Sequence[tuple[int, bytes]]) -> tuple[Seqs, Vector]:
    """A scope's stored (seq, vector bytes) rows, in seq order, as ``nearest``'s seqs and
    matrix; ``StoreError`` when the stored vectors are not all of one whole size."""
    import numpy as np

    size = len(rows[0][1]) if rows else 4
    if size % 4 or not size or any(len(blob) != size for _seq, blob in rows):
        raise StoreError(f"scope {scope_key!r} holds vectors of the model that are not all"
                         " of one size")
    seqs = np.fromiter((seq for seq, _blob in rows), dtype=np.int64, count=len(rows))
    matrix = np.frombuffer(b"".join(blob for _seq, blob in rows), dtype="<f4")
    return seqs, matrix.reshape(len(rows), size // 4).astype(np.float32, copy=False)


def nearest(seqs: Seqs, matrix: Vector, query: Vector, limit: int, floor: float,
            include: Collection[int] = ()) -> list[tuple[int, float]]:
    """``VectorStore.nearest``'s answer as (seq, cosine), over ``seqs`` (ascending, one per
    row of ``matrix``) and their unit vectors: the ``limit`` best at ``floor`` or above,
    best first, ties to the later row, then ``include``'s other seqs among ``seqs``."""
    import numpy as np

    if not len(seqs) or matrix.shape[1] != query.shape[0]:
        if len(seqs):
            raise StoreRefused(f"the query's vector has {query.shape[0]} dimensions where"
                               f" this scope's vectors of the model have {matrix.shape[1]}")
        return []
    # A poisoned stored vector (not finite, not of unit length) must not outrank the rest.
    cosines = np.clip(np.nan_to_num(np.einsum("ij,j->i", matrix, query), nan=-1.0),
                      -1.0, 1.0)
    rows = np.arange(len(seqs))
    if 0 < limit < len(seqs):  # only rows as good as the limit-th best can be chosen
        rows = np.flatnonzero(cosines >= np.partition(cosines, len(seqs) - limit)[-limit])
    best = rows[np.lexsort((-rows, -cosines[rows]))][:max(limit, 0)]  # then the newer
    answer = [(int(seqs[row]), float(cosines[row])) for row in best]
    answer = [(seq, cosine) for seq, cosine in answer if cosine >= floor]
    if include:
        more = np.array(sorted(set(include) - {seq for seq, _cosine in answer}),
                        dtype=np.int64)
        at = np.minimum(np.searchsorted(seqs, more), len(seqs) - 1)
        answer.extend((int(seqs[row]), float(cosines[row]))
                      for row in at[seqs[at] == more])
    return answer


def answered(scope_key: str, chosen: Sequence[tuple[int, float]],
             records: Collection[Record]) -> list[tuple[Record, float]]:
    """``nearest``'s (seq, cosine) answer as (record, cosine), in its order, for the chosen
    records a SQL store read back (one retired meanwhile, or a row whose id is not its
    seq's, is left out)."""
    by_id = {record.id: record for record in records}
    found = ((by_id.get(memory_id(scope_key, seq)), cosine) for seq, cosine in chosen)
    return [(record, cosine) for record, cosine in found if record is not None]


class Matrices:
    """A SQL store's copies of scopes' matrices: (scope, model) → (change counter, seqs,
    matrix), at most ``budget`` bytes of them. Safe from several threads."""

    def __init__(self, budget: int = MATRIX_BYTES) -> None:
        self.budget = budget
        self._held: OrderedDict[tuple[str, str], tuple[int, Seqs, Vector]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, scope_key: str, model: str, generation: int) -> tuple[Seqs, Vector] | None:
        """The copy read at ``generation``, None when there is none (or an older one)."""
        with self._lock:
            held = self._held.get((scope_key, model))
            if held is None or held[0] != generation:
                return None
            self._held.move_to_end((scope_key, model))
            return held[1], held[2]

    def keep(self, scope_key: str, model: str, generation: int,
             rows: Sequence[tuple[int, bytes]]) -> tuple[Seqs, Vector]:
        """The matrix of ``rows`` (``stacked``), read at ``generation``, kept in place of the
        scope's copy of the model when it fits the budget."""
        seqs, matrix = stacked(scope_key, rows)
        size = seqs.nbytes + matrix.nbytes
        with self._lock:
            old = self._held.get((scope_key, model))
            if old is not None and old[0] > generation:
                return seqs, matrix  # a later copy is held already
            if old is not None:
                del self._held[(scope_key, model)]
                self._bytes -= old[1].nbytes + old[2].nbytes
            if size <= self.budget:
                self._held[(scope_key, model)] = (generation, seqs, matrix)
                self._bytes += size
                while self._bytes > self.budget:
                    _key, (_g, gone_seqs, gone) = self._held.popitem(last=False)
                    self._bytes -= gone_seqs.nbytes + gone.nbytes
        return seqs, matrix
