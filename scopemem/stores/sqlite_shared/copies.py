"""Carrying a scope's copy in memory across this store's own write.

A write changes a scope's change counter, so the copy read before it (``postgres.cache``'s
``ScopeCopy``) would answer nothing after it, and a scope written several times a second
would be read from its postings on nearly every retrieval. But the write knows what it did
to the postings (``writes.Change``): when the copy held is at the counter the write's
transaction began at, nobody else committed to the scope between the copy and the write
(the transaction held the shard's write lock from that read to its commit), so the copy
plus the write's postings, minus those it took out, is the scope's index at the counter the
commit left: the copy is replaced by that one. When another process wrote in between, the
counters differ and nothing is carried: the copy is checked, found stale and dropped at
the next retrieval, as always.
"""

from __future__ import annotations

from scopemem.stores.dense import DenseIndex
from scopemem.stores.postgres.cache import PostingsCache, ScopeCopy, Touches
from scopemem.stores.sqlite_shared.writes import Change

__all__ = ["carried", "carry"]


def carry(cache: PostingsCache, scope_key: str, change: Change) -> bool:
    """Replace the scope's copy by the one ``change`` leaves, when the copy held is at the
    counter the change began at; whether it was carried."""
    copy = cache.latest(scope_key)
    if copy is None or copy.generation != change.before:
        return False
    return cache.replace(scope_key, copy.generation, carried(copy, change))


def carried(copy: ScopeCopy, change: Change) -> ScopeCopy:
    """``copy`` with ``change`` applied, at the counter after it."""
    postings = dict(copy.postings)
    gone: dict[str, set[int]] = {}
    for term, seq in change.unposted:
        gone.setdefault(term, set()).add(seq)
    added: dict[str, set[int]] = {}
    for term, seq, _continues in change.posted:
        added.setdefault(term, set()).add(seq)
    for term in gone.keys() | added.keys():
        holders = (postings.get(term, frozenset()) - gone.get(term, set())) | added.get(
            term, set())
        if holders:
            postings[term] = frozenset(holders)
        else:
            postings.pop(term, None)
    retired = {seq for _term, seq in change.unposted}
    continues = frozenset((copy.continues - retired)
                          | {seq for _t, seq, continues in change.posted if continues})
    touches = Touches(copy.touches)
    for seq in retired:
        touches.pop(seq, None)
    touches.update((seq, (touched, None)) for seq, touched in change.touched)
    held: set[int] = set().union(*postings.values()) if postings else set()
    return ScopeCopy(change.before + 1, change.active, postings, continues,
                     sum(map(len, postings.values())), touches,
                     DenseIndex(postings, held, continues))
