"""Use counts not saved yet: ``seq → [uses, last use]``, as both SQL stores keep them.

A retrieval counts one use of each record it returns (``add_bumps``); a save takes the whole
dict as its batch and, when it fails, merges it back (``add_bumps`` with the batch's uses
and times), so no use is lost or counted twice. A last use never moves back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["Bumps", "add_bumps", "bumped", "merge_bumps"]

# Positions in a row of ``shared.sql.COLUMNS``: last use, use count.
_LAST_USED, _USES = 9, 10

#: seq -> [uses, last use]
Bumps = dict[int, list[int]]


def add_bumps(pending: Bumps, seqs: Iterable[int], now: int, uses: int = 1) -> None:
    """Count ``uses`` uses at ``now`` of each of ``seqs``."""
    for seq in seqs:
        bump = pending.get(seq)
        if bump is None:
            pending[seq] = [uses, now]
        else:
            bump[0] += uses
            if now > bump[1]:
                bump[1] = now


def merge_bumps(pending: Bumps, batch: Mapping[int, list[int]] | Mapping[int, tuple[int, int]]
                ) -> None:
    """Put a batch whose save failed back into ``pending``."""
    for seq, (uses, last) in batch.items():
        add_bumps(pending, (seq,), last, uses)


def bumped(row: Sequence[Any], pending: Mapping[int, list[int]]) -> Sequence[Any]:
    """A row of ``shared.sql.COLUMNS`` as it will be once its ``pending`` uses are saved:
    the use count added, the last use moved on (never back)."""
    bump = pending.get(row[0])
    if bump is None:
        return row
    uses, last = bump
    saved: int | None = row[_LAST_USED]
    return (*row[:_LAST_USED], last if saved is None or last > saved else saved,
            row[_USES] + uses, *row[_USES + 1:])
