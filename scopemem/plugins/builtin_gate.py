"""The built-in status gate: a fact carrying any status or change-description marker is
never written. Summaries are episodic by design and pass ungated."""

from __future__ import annotations

from scopemem.core.records import Candidate, Kind
from scopemem.plugins.markers import hookimpl


@hookimpl
def scopemem_rejection_markers(candidate: Candidate) -> list[str] | None:
    if candidate.kind != Kind.FACT:
        return None
    from scopemem.core.gate import rejection_markers  # its rules load on the first write

    return rejection_markers(candidate.text) or None
