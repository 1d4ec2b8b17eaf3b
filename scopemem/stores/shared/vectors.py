"""The semantic lane's vectors as every store keeps and searches them.

A vector is a record's embedding under one model (``memory.embeddings``), computed once when
the record is written (or by ``scopemem embeddings backfill``) and kept beside it: on the
wire and on disk it is ``dims`` little-endian float32 values (4 bytes a dimension: 1,536
bytes for all-MiniLM-L6-v2's 384), of unit length, so a cosine is a dot product. A store
keeps, per record, the model its vector came from; a retrieval reads only the vectors of
the model asked for, and a record whose vector is of another model counts as having none.

``VectorStore`` is what a store offers for the lane (optional, like ``CountingStore``);
``nearest.nearest`` is the one search every store runs: numpy brute force over a scope's
active records' vectors (about 0.6 ms for 10,000 vectors of 384 dimensions). ``check`` is the
one validation every store and the worker apply to a vector that comes in: what it refuses
is ``StoreRefused`` (the input itself, which the worker answers 400).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from scopemem.core.records import Record
from scopemem.core.scopes import record_seq
from scopemem.errors import StoreRefused
from scopemem.stores.base import check_scope_key
from scopemem.stores.shared.batches import seq_in_scope, seqs_in_scope
from scopemem.stores.shared.nearest import nearest

if TYPE_CHECKING:  # numpy loads with the first vector, not with the stores' modules
    import numpy as np
    import numpy.typing as npt

    from scopemem.stores.shared.nearest import Seqs

    Vector = npt.NDArray[np.float32]

__all__ = ["MAX_DIMENSIONS", "MAX_MISSING_PAGE", "MAX_MODEL_CHARS", "MAX_PUT_VECTORS",
           "MODEL_PATTERN", "VECTOR_PATTERN", "Shelf", "VectorStore", "check",
           "check_dimensions", "check_model", "keyed", "missing_params", "pack"]

#: The most dimensions a vector may have (OpenAI's largest model has 3,072).
MAX_DIMENSIONS = 4096
MAX_MODEL_CHARS = 200
#: A model's name: printable ASCII (``memory.embeddings``, ``<embedder>/<model>``).
MODEL_PATTERN = "^[ -~]+$"
#: Base64 as the worker carries a vector (``worker_aiohttp/vectors.py``).
VECTOR_PATTERN = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
#: Vectors one call of the worker's ``/put-vectors`` carries, and records one
#: ``/vectors-missing`` answers.
MAX_PUT_VECTORS = 64
MAX_MISSING_PAGE = 256
#: The least length a stored vector may have before normalizing: anything shorter is zero.
_TINY = 1e-12


@runtime_checkable
class VectorStore(Protocol):
    """A store that keeps the semantic lane's vectors. Every method is scoped to one scope
    key and reads or changes active records only."""

    async def vectors_missing(self, scope_key: str, model: str, limit: int
                              ) -> list[tuple[str, str]]:
        """(id, text) of up to ``limit`` active records of the scope without a vector of
        ``model``, oldest first."""

    async def put_vectors(self, scope_key: str, model: str,
                          vectors: Sequence[tuple[str, bytes]]) -> int:
        """Keep each (record id, vector) as that record's vector of ``model`` (replacing a
        vector of any model); ids that are not active records of the scope are skipped.
        ``StoreRefused`` for a vector ``check`` refuses, or one whose dimensions differ from
        the scope's other vectors of that model. Answers how many were kept."""

    async def nearest(self, scope_key: str, model: str, vector: bytes, limit: int,
                      floor: float, include: Collection[str] = ()
                      ) -> list[tuple[Record, float]]:
        """The ``limit`` active records whose vector of ``model`` has the highest cosine
        with ``vector``, of those at ``floor`` or above, best first (ties to the newer), then
        the records of ``include`` not among them that have such a vector, whatever their
        cosine. Never bumps usage."""


def check_model(model: object) -> str:
    if not isinstance(model, str) or not 1 <= len(model) <= MAX_MODEL_CHARS \
            or not model.isascii() or not model.isprintable():
        raise StoreRefused(f"an embedding model must be 1 to {MAX_MODEL_CHARS} printable"
                           f" ASCII characters, got {model!r:.80}")
    return model


def missing_params(scope_key: str, model: str, limit: int) -> dict[str, Any] | None:
    """A SQL store's parameters for ``VectorStore.vectors_missing`` (scope, model, limit),
    checked; None when ``limit`` asks for nothing."""
    check_scope_key(scope_key)
    check_model(model)
    return {"scope": scope_key, "model": model, "limit": limit} if limit > 0 else None


def check(value: object, dimensions: int | None = None) -> Vector:
    """``value`` (float32 bytes) as a unit vector; ``StoreRefused`` saying why not: not bytes,
    a length that is not whole float32 values, no or too many dimensions, a value that is
    not finite, a zero vector, or ``dimensions`` given and different."""
    import numpy as np

    if not isinstance(value, bytes | bytearray | memoryview):
        raise StoreRefused(f"a vector must be bytes of float32 values, got "
                           f"{type(value).__name__}")
    size = len(value)
    if size % 4 or not 4 <= size <= 4 * MAX_DIMENSIONS:
        raise StoreRefused(f"a vector must hold 1 to {MAX_DIMENSIONS} float32 values "
                           f"(a multiple of 4 bytes), got {size} bytes")
    array = np.frombuffer(bytes(value), dtype="<f4").astype(np.float32)
    check_dimensions(array.shape[0], dimensions)
    if not np.isfinite(array).all():
        raise StoreRefused("a vector holds a value that is not finite")
    norm = float(np.linalg.norm(array.astype(np.float64)))
    if not math.isfinite(norm) or norm < _TINY:
        raise StoreRefused("a vector of length zero has no direction")
    # Divided in float64: the norm of float32 values near their largest overflows float32
    # (the vector would become zeros).
    result: Vector = (array.astype(np.float64) / norm).astype(np.float32)
    return result


def pack(vector: Sequence[float] | npt.NDArray[np.floating[Any]]) -> bytes:
    """A vector as the lane stores and sends it: little-endian float32 bytes."""
    import numpy as np

    return np.asarray(vector, dtype="<f4").tobytes()


def check_dimensions(dimensions: int, held: int | None) -> None:
    """``StoreRefused`` when a batch's ``dimensions`` are not those the scope's vectors of the
    model already ``held`` (None: it holds none)."""
    if held is not None and held != dimensions:
        raise StoreRefused(f"a vector of {dimensions} dimensions where this scope's vectors"
                           f" of the model have {held}")


def keyed(scope_key: str, model: str, vectors: Sequence[tuple[str, bytes]]
          ) -> dict[int, bytes]:
    """A batch for ``VectorStore.put_vectors`` of a store keyed by seq, the scope key and
    the model checked first: each vector checked (``StoreRefused`` for any refused, or for
    a batch of mixed dimensions) and normalized, by its record's seq; ids that are not the
    scope's are left out."""
    check_scope_key(scope_key)
    check_model(model)
    checked = [(seq_in_scope(scope_key, record_id), check(value))
               for record_id, value in vectors]
    if len({vector.shape[0] for _seq, vector in checked}) > 1:
        raise StoreRefused("vectors of different dimensions in one batch")
    return {seq: vector.astype("<f4").tobytes() for seq, vector in checked
            if seq is not None}


class Shelf:
    """The vectors of a store that holds its records in this process (the in-process
    store): scope → record id → (model, unit vector), with each scope's matrix per model of
    its active records, built on the first search after a put or a change to which records
    are active (the store's ``stamp`` of its active set). The vectors of records retired
    since are dropped by the scope's next put."""

    def __init__(self) -> None:
        self._vectors: dict[str, dict[str, tuple[str, Vector]]] = {}
        self._matrices: dict[tuple[str, str], tuple[int, Seqs, Vector]] = {}

    def missing(self, scope_key: str, model: str, active: Sequence[Record], limit: int
                ) -> list[tuple[str, str]]:
        held = self._vectors.get(scope_key, {})
        answer: list[tuple[str, str]] = []
        for record in active:
            if len(answer) >= limit:
                break
            entry = held.get(record.id)
            if entry is None or entry[0] != model:
                answer.append((record.id, record.text))
        return answer

    def put(self, scope_key: str, model: str, vectors: Sequence[tuple[str, bytes]],
            active: Collection[str]) -> int:
        check_model(model)
        held = self._vectors.setdefault(scope_key, {})
        # A record retired since its vector was put keeps none (the SQL stores' triggers drop
        # it with the retirement): neither memory nor a dimension count of the model.
        for record_id in [record_id for record_id in held if record_id not in active]:
            del held[record_id]
        dimensions = next((vector.shape[0] for name, vector in held.values()
                           if name == model), None)
        checked = []
        for record_id, value in vectors:
            vector = check(value, dimensions)
            dimensions = vector.shape[0]
            checked.append((record_id, vector))
        kept = 0
        for record_id, vector in checked:
            if record_id in active:
                held[record_id] = (model, vector)
                kept += 1
        if kept:
            self._drop_matrices(scope_key)
        return kept

    def search(self, scope_key: str, model: str, query: bytes, limit: int, floor: float,
               include: Collection[str], active: Mapping[int, tuple[int, Record]],
               stamp: int) -> list[tuple[Record, float]]:
        """``VectorStore.nearest`` over the vectors of ``active`` (seq → (last touched,
        record)), the active records at ``stamp``."""
        import numpy as np

        vector = check(query)
        cached = self._matrices.get((scope_key, model))
        if cached is None or cached[0] != stamp:
            held = self._vectors.get(scope_key, {})
            rows = sorted((record_seq(record_id), entry) for record_id, (name, entry)
                          in held.items() if name == model and record_seq(record_id) in active)
            seqs = np.array([seq for seq, _v in rows], dtype=np.int64)
            matrix = (np.vstack([entry for _seq, entry in rows]) if rows
                      else np.zeros((0, vector.shape[0]), dtype=np.float32))
            cached = self._matrices[(scope_key, model)] = (stamp, seqs, matrix)
        _stamp, seqs, matrix = cached
        return [(active[seq][1], cosine) for seq, cosine
                in nearest(seqs, matrix, vector, limit, floor, seqs_in_scope(scope_key, include))]

    def drop(self, scope_key: str) -> None:
        self._vectors.pop(scope_key, None)
        self._drop_matrices(scope_key)

    def _drop_matrices(self, scope_key: str) -> None:
        self._matrices = {key: value for key, value in self._matrices.items()
                          if key[0] != scope_key}
