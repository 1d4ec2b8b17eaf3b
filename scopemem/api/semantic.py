"""The semantic lane as ``Memory`` runs it: the embedder ``memory.embeddings`` names, the
vectors it gives checked and normalized, the records without one embedded, a scope's dense
candidates read.

Off (``memory.embeddings`` unset), nothing here is built and the read is the keyword read,
byte for byte. On, each record gets its vector once, right after the write that made it
(reflection, ``remember``) and from ``scopemem embeddings backfill`` for records older than
the lane or imported (``scopemem import`` embeds nothing): both are ``embed_missing``,
which asks the store for its records without a vector of the model and embeds them in
batches. A text the embedder refuses (``ProviderError.refused_input``: a text longer than
its model takes) costs its own record's vector: its batch is split in halves until the
refused texts stand alone, and the lane steps over them for the rest of its life (another
process asks once more). Any other failure stops at one call a batch. A query is embedded
once per ``context_block``. How a cosine joins a match is ``scopemem.core.fusion``.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping, Sequence

import attrs

from scopemem.config import MemoryConfig
from scopemem.core import scoring
from scopemem.core.fusion import Fusion, semantic_reads
from scopemem.errors import ConfigError, StoreUnsupported
from scopemem.plugins.embedders import Embedder, build_embedder
from scopemem.plugins.manager import PluginManager
from scopemem.plugins.providers import ModelRef, ProviderError, parse_model_ref
from scopemem.stores.base import Hit
from scopemem.stores.shared.vectors import MAX_DIMENSIONS, MAX_MISSING_PAGE, VectorStore, pack

__all__ = ["EMBED_BATCH", "MAX_REFUSED", "Embedded", "SemanticLane", "build_lane",
           "embed_written", "fused_hits"]

log = logging.getLogger("scopemem")

#: Records embedded per call to the embedder (and per store write of their vectors).
EMBED_BATCH = 32
#: The most records of one scope a lane steps over for their refused text: the records still
#: without a vector are read oldest first, past the refused ones, and a store answers at most
#: ``MAX_MISSING_PAGE`` at once.
MAX_REFUSED = MAX_MISSING_PAGE - EMBED_BATCH


@attrs.frozen
class Embedded:
    """What one ``embed_missing`` did: vectors kept, records whose text the embedder refused
    (no vector; ``reason``: the first one's id and the embedder's reason)."""

    kept: int = 0
    refused: int = 0
    reason: str | None = None


class SemanticLane:
    """One embedder and model, with the fusion the read applies."""

    def __init__(self, embedder: Embedder, ref: ModelRef, fusion: Fusion,
                 wait_seconds: float = 2.0) -> None:
        self.embedder = embedder
        self.ref = ref
        self.wait_seconds = wait_seconds  # the most a read waits for its brief's vector
        self.model = str(ref)  # what the store tags each vector with
        self.fusion = fusion
        self._dimensions: int | None = None
        # Per scope, the records whose text the embedder refused: never asked again by
        # this lane (at most MAX_REFUSED a scope).
        self._refused: dict[str, set[str]] = {}
        # The store serves no vectors (a worker of an older release): said once, then the
        # lane asks neither the store nor the embedder.
        self.idle = False

    def store_unsupported(self, exc: StoreUnsupported) -> None:
        if not self.idle:
            self.idle = True
            log.warning("[memory] the store keeps no vectors (%s); the semantic lane is idle",
                        exc)

    async def vectors(self, texts: Sequence[str]) -> list[bytes]:
        """One unit float32 vector per text; ``ProviderError`` when the embedder answers
        anything else (a count, a dimension or a value that does not fit)."""
        import numpy as np  # with the first vector, not with the read path's modules

        raw = await self.embedder.embed(model=self.ref.model, texts=list(texts))
        if not isinstance(raw, Sequence | np.ndarray) or len(raw) != len(texts):
            raise ProviderError(f"embedder {self.ref.provider}: asked for {len(texts)} "
                                f"vectors, got {len(raw) if hasattr(raw, '__len__') else 0}")
        packed: list[bytes] = []
        expected = self._dimensions
        for vector in raw:
            try:
                array = np.asarray(vector, dtype=np.float64)
            except (TypeError, ValueError):
                raise ProviderError(f"embedder {self.ref.provider}: a vector is not a list "
                                    "of numbers") from None
            except OverflowError:  # an integer past float64's largest: JSON allows it
                raise ProviderError(f"embedder {self.ref.provider}: a vector holds a value "
                                    "that is not finite", refused_input=True) from None
            dimensions = array.shape[0] if array.ndim == 1 else 0
            if not 1 <= dimensions <= MAX_DIMENSIONS:
                raise ProviderError(f"embedder {self.ref.provider}: a vector of shape "
                                    f"{array.shape} (expected 1 to {MAX_DIMENSIONS} numbers)")
            if expected is None:
                expected = dimensions
            elif dimensions != expected:
                raise ProviderError(f"embedder {self.ref.provider}: model {self.ref.model} "
                                    f"gave a vector of {dimensions} dimensions after "
                                    f"{expected}")
            # Not finite, or zero: unusable for its text (the others may be fine).
            if not np.isfinite(array).all():
                raise ProviderError(f"embedder {self.ref.provider}: a vector holds a value "
                                    "that is not finite", refused_input=True)
            # Scaled by its largest value first: the norm of values near float64's largest
            # (or smallest) would overflow (or underflow) and lose a finite direction.
            peak = float(np.abs(array).max())
            norm = float(np.linalg.norm(array / peak)) if peak > 0.0 else 0.0
            if not math.isfinite(norm) or norm == 0.0:
                raise ProviderError(f"embedder {self.ref.provider}: a vector is zero",
                                    refused_input=True)
            packed.append(pack(array / peak / norm))
        return packed

    async def query(self, text: str) -> bytes:
        """The brief's vector, or ``ProviderError`` when the embedder fails or has not
        answered within ``wait_seconds`` (its call is then cancelled)."""
        try:
            return (await asyncio.wait_for(self.vectors([text]), self.wait_seconds))[0]
        except TimeoutError:
            raise ProviderError(f"embedder {self.ref.provider}: no vector for the brief "
                                f"within {self.wait_seconds:g} s") from None

    def brief(self, store: object, text: str) -> asyncio.Future[bytes] | None:
        """The brief's vector, being embedded, for every scope read of one block; None when
        the lane reads nothing for it: a store that keeps no vectors (or said it serves none:
        the lane is idle), a blank or a long brief
        (``core.fusion.semantic_reads``). A failure is each scope read's warning: one that
        no read awaited (every keyword read failed) is retrieved here, never left for asyncio
        to log as "never retrieved"."""
        if self.idle or not isinstance(store, VectorStore) or not semantic_reads(text):
            return None
        vector = asyncio.ensure_future(self.query(text))
        vector.add_done_callback(_retrieved)
        return vector

    async def embed_missing(self, store: VectorStore, scope_key: str, *,
                            progress: Callable[[int], None] | None = None) -> Embedded:
        """Embed every active record of the scope without a vector of the model, in
        batches, but those whose text the embedder refuses. Resumable by construction: each
        batch is kept before the next is asked for, so a run cut short leaves only its last
        batch to redo. ``ProviderError`` for a failure that is not the texts' (then at one
        call for the batch), or when the scope has more than ``MAX_REFUSED`` refused texts."""
        refused = self._refused.setdefault(scope_key, set())
        done = Embedded()
        while True:
            window = await store.vectors_missing(scope_key, self.model,
                                                 EMBED_BATCH + len(refused))
            missing = [(i, text) for i, text in window if i not in refused][:EMBED_BATCH]
            if not missing:
                return done
            vectors, failed = await self._split(missing)
            refused.update(record_id for record_id, _reason in failed)
            stored = await store.put_vectors(scope_key, self.model, vectors) if vectors else 0
            done = Embedded(done.kept + stored, done.refused + len(failed),
                            done.reason or (": ".join(failed[0]) if failed else None))
            # The dimension count a store took: every later vector of the model must have it.
            # Never one only read with (a query's), which no store may have checked.
            if stored and self._dimensions is None:
                self._dimensions = len(vectors[0][1]) // 4
            if progress is not None:
                progress(stored)
            if len(refused) > MAX_REFUSED:
                raise ProviderError(
                    f"embedder {self.ref.provider} refused the text of more than "
                    f"{MAX_REFUSED} records of {scope_key} (the first, {done.reason}); the "
                    "records after them wait for an embedder that takes them")
            if stored == 0 and not failed:  # they all left active status meanwhile
                return done

    async def _split(self, batch: Sequence[tuple[str, str]]
                     ) -> tuple[list[tuple[str, bytes]], list[tuple[str, str]]]:
        """(id, vector) of each record of ``batch`` embedded, and (id, reason) of each whose
        text the embedder refused: a batch refused for its texts is split in halves, down
        to the texts refused alone. Any other failure raises, at its first call."""
        try:
            vectors = await self.vectors([text for _id, text in batch])
        except ProviderError as exc:
            if not exc.refused_input:
                raise
            if len(batch) == 1:
                return [], [(batch[0][0], str(exc))]
            half = len(batch) // 2
            kept, failed = await self._split(batch[:half])
            later_kept, later_failed = await self._split(batch[half:])
            return kept + later_kept, failed + later_failed
        return list(zip([record_id for record_id, _text in batch], vectors, strict=True)), []

    async def read(self, store: object, scope_key: str, hits: list[Hit],
                   vector: asyncio.Future[bytes], limit: int
                   ) -> tuple[list[Hit], dict[str, float] | None]:
        """A scope's keyword hits with its dense candidates beside them (match 0 when they
        are not keyword hits), and every one's cosine (a hit without a vector has none).
        A lane that cannot answer (the embedder, or a store without vectors) leaves the
        keyword hits as they are, with no cosines, and one warning."""
        if not isinstance(store, VectorStore) or self.idle:
            return hits, None
        try:
            nearest = await store.nearest(scope_key, self.model, await asyncio.shield(vector),
                                          limit, self.fusion.floor,
                                          [hit.record.id for hit in hits])
        except asyncio.CancelledError:
            raise
        except StoreUnsupported as exc:
            self.store_unsupported(exc)
            return hits, None
        except Exception as exc:
            log.warning("[memory] semantic read of %s failed: %s", scope_key, exc)
            return hits, None
        lexical = {hit.record.id for hit in hits}
        dense = [Hit(record, 0.0) for record, _cosine in nearest if record.id not in lexical]
        return [*hits, *dense], {record.id: cosine for record, cosine in nearest}

    async def close(self) -> None:
        await self.embedder.close()


def _retrieved(future: asyncio.Future[bytes]) -> None:
    if not future.cancelled():
        future.exception()


def fused_hits(hits: Sequence[Hit], cosines: Mapping[str, float], fusion: Fusion,
               min_match: float, now: int) -> list[Hit]:
    """The relevant hits of a pool, best first, as ``core.fusion`` scores them (a hit
    without a vector has cosine 0)."""
    scored = []
    for hit in hits:
        cosine = cosines.get(hit.record.id, 0.0)
        if fusion.relevant(hit.match, cosine, min_match):
            scored.append((scoring.score_of(fusion.match(hit.match, cosine),
                                            hit.record.last_touched, now), hit))
    scored.sort(key=lambda item: -item[0])
    return [hit for _score, hit in scored]


def build_lane(pm: PluginManager, config: MemoryConfig, environ: Mapping[str, str] | None
               ) -> SemanticLane | None:
    """The lane ``memory.embeddings`` names, or None when it is unset. No I/O."""
    if config.embeddings is None:
        return None
    try:
        ref = parse_model_ref(config.embeddings)
    except ValueError as exc:
        raise ConfigError(f"memory.embeddings: {exc}") from None
    embedder = build_embedder(pm, config, ref, environ)
    return SemanticLane(embedder, ref, Fusion(floor=config.embeddings_floor,
                                                  share=config.embeddings_share),
                        config.embeddings_wait_seconds)


async def embed_written(lane: SemanticLane | None, store: object, scope_key: str, *,
                        bounded: bool = False) -> None:
    """After a write to ``scope_key``: embed every record of the scope without a vector
    yet, the write's and any the lane has not embedded before (so the first write to a
    scope after the lane is turned on embeds the scope's backlog, as a backfill of it would).
    A failure is one warning: the records are written, and the next write or ``scopemem
    embeddings backfill`` embeds them. Texts the embedder refused are one warning too (how
    many, and the first reason). ``bounded`` (a person waits for the answer, as for
    ``remember``): so is an embedder that has not finished within the lane's
    ``wait_seconds``."""
    if lane is None or lane.idle:
        return
    if not isinstance(store, VectorStore):
        log.warning("[memory] the store keeps no vectors; the semantic lane is idle")
        return
    try:
        embedding = lane.embed_missing(store, scope_key)
        done = await (asyncio.wait_for(embedding, lane.wait_seconds) if bounded
                      else embedding)
        if done.refused:
            log.warning("[memory] %d record(s) of %s got no vector: the embedder refused "
                        "their text (the first, %s)", done.refused, scope_key, done.reason)
    except TimeoutError:
        log.warning("[memory] embedding new records of %s did not finish within %g s; the "
                    "next write or `scopemem embeddings backfill` embeds them", scope_key,
                    lane.wait_seconds)
    except StoreUnsupported as exc:
        lane.store_unsupported(exc)
    except Exception as exc:  # the write stands; its vectors come later
        log.warning("[memory] embedding new records of %s failed: %s", scope_key, exc)
