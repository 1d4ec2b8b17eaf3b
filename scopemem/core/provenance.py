"""What "provenance that names a person" means, for ``scopemem forget-person``.

A record's provenance is its thread key and its run id. A person is named by their scope
key's last segment, their platform id (``U0123`` in ``user:slack:U0123``). A thread key or a
run id names them when that id occurs in it as a whole token: bounded on each side by the
start or end of the value or by a character that is not a letter or a digit (``:``, ``/``,
``-``...), compared exactly (platform ids are case-sensitive). So ``slack:D1:U0123`` and
``run-U0123-7`` name ``U0123``; ``slack:C1:U01234`` and ``xU0123`` do not. Scrubbing replaces
each such occurrence with ``removed`` and keeps the rest of the value, so two threads that
differed still differ and a record keeps its place in its thread.
"""

from __future__ import annotations

import functools
import re

__all__ = ["REMOVED", "person_id", "scrub_source"]

#: What replaces a person's id in a thread key or a run id.
REMOVED = "removed"


def person_id(scope_key: str) -> str:
    """The id a person's scope key names them by: its last ``:`` segment (``U0123`` for
    ``user:slack:U0123``); empty when the key ends with ``:``."""
    return scope_key.rpartition(":")[2]


@functools.lru_cache(maxsize=16)
def _pattern(person: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![^\W_]){re.escape(person)}(?![^\W_])")


def scrub_source(value: str | None, person: str) -> str | None:
    """``value`` (a thread key or a run id) with each whole-token occurrence of ``person``
    replaced by ``REMOVED``; ``value`` itself (the same object) when it does not name them."""
    if value is None or not person or person not in value:
        return value
    scrubbed = _pattern(person).sub(REMOVED, value)
    return value if scrubbed == value else scrubbed
