"""A lone surrogate (valid in a Python string, never in UTF-8, so no store can keep or send
one): in a scope key, a ``StoreError`` from every store before anything is written; in a
query, a separator, as every analyzer reads it. Never an encoding error from deeper down."""

from __future__ import annotations

import pytest

from scopemem.errors import StoreError
from scopemem.stores.base import search_hits
from tests.conftest import fact

ORG = "org:acme"
LONE = "org:acme\ud800"


async def test_a_scope_key_with_a_lone_surrogate_is_refused(store):
    for call in (lambda: store.write(LONE, [fact("deploys need the vpn")]),
                 lambda: store.list(LONE, 5),
                 lambda: search_hits(store, LONE, "vpn", 5, bump=False, strict=True),
                 lambda: store.delete_scope(LONE)):
        with pytest.raises(StoreError, match="lone surrogate"):
            await call()
    assert await store.list(ORG, 5) == []


async def test_a_lone_surrogate_in_a_query_separates_words(store):
    await store.write(ORG, [fact("deploys need the vpn"), fact("the build uses node 20")])
    for query in ("vpn\ud800node", "\ud800"):
        spaced = query.replace("\ud800", " ")
        assert [r.id for r in await store.retrieve(ORG, query, 5)] == \
            [r.id for r in await store.retrieve(ORG, spaced, 5)]
        assert await store.list(ORG, 5, query=query) == await store.list(ORG, 5, query=spaced)
