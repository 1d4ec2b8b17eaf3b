"""The worker's routes of the semantic lane (``stores.shared.vectors.VectorStore``), what
the worker client's vector calls (``stores/worker_calls.py``):

``/vectors-missing {scopeKey, model, limit}``
    up to ``limit`` active records of the scope without a vector of ``model``, oldest
    first → ``{missing: [{id, text}]}``
``/put-vectors {scopeKey, model, vectors: [{id, vector}]}``
    each vector kept as its record's → ``{ok, kept}``
``/nearest {scopeKey, model, vector, limit, floor, include?}``
    the records whose vector is nearest the query's → ``{records, cosines}`` (one cosine
    per record, in its order)

A vector travels as base64 of little-endian float32 values (``schema.py``'s ``Vector``).
Each body is validated against ``schema.py``, then every vector is decoded and checked by
the rule every store runs (``shared.vectors.check``: a whole number of float32 values, at
most ``MAX_DIMENSIONS``, finite, not zero) before the store is called; a vector the store
refuses (dimensions unlike the scope's others) is a 400 with its reason as well. A store
that keeps no vectors answers 501.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from scopemem.errors import StoreRefused
from scopemem.stores.shared.vectors import VectorStore, check
from scopemem.worker_aiohttp.handling import (
    Handler,
    capability_route,
    json_answer,
    records_answer,
)

__all__ = ["ROUTES", "decoded"]

log = logging.getLogger("scopemem.worker")

Answer = Callable[[web.Request, VectorStore, dict[str, Any]], Awaitable[web.StreamResponse]]


def decoded(text: str, where: str) -> bytes:
    """A vector's base64 as bytes, checked as every store checks it; ``StoreRefused``
    naming ``where`` otherwise."""
    try:
        value = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise StoreRefused(f"{where} is not base64") from None
    try:
        check(value)
    except StoreRefused as exc:
        raise StoreRefused(f"{where}: {exc}") from None
    return value


def _route(path: str, answer: Answer) -> Handler:
    return capability_route(path, VectorStore, "this worker's store keeps no vectors", answer,
                            (StoreRefused,))


async def _missing(_request: web.Request, store: VectorStore, body: dict[str, Any]
                   ) -> web.StreamResponse:
    missing = await store.vectors_missing(body["scopeKey"], body["model"], body["limit"])
    return json_answer({"missing": [{"id": record_id, "text": text}
                                    for record_id, text in missing]})


async def _put(_request: web.Request, store: VectorStore, body: dict[str, Any]
               ) -> web.StreamResponse:
    vectors = [(item["id"], decoded(item["vector"], f"vectors[{n}].vector"))
               for n, item in enumerate(body["vectors"])]
    kept = await store.put_vectors(body["scopeKey"], body["model"], vectors)
    log.info("[put-vectors] %s <- %d of %d", body["scopeKey"], kept, len(vectors))
    return json_answer({"ok": True, "kept": kept})


async def _nearest(request: web.Request, store: VectorStore, body: dict[str, Any]
                   ) -> web.StreamResponse:
    found = await store.nearest(body["scopeKey"], body["model"],
                                decoded(body["vector"], "vector"), body["limit"],
                                float(body["floor"]), body.get("include", []))
    # A finite float's repr is its JSON (cosines are in [-1, 1]).
    extra = ',"cosines":[' + ",".join(repr(cosine) for _record, cosine in found) + "]"
    return records_answer(request, [record for record, _cosine in found], extra)


#: The routes, by path, for the application's table of data routes.
ROUTES = {path: _route(path, answer) for path, answer in (
    ("/vectors-missing", _missing), ("/put-vectors", _put), ("/nearest", _nearest))}
