"""The Hub's rendering of a stored time."""

from __future__ import annotations

import pytest

from scopemem.hub.app import _when


@pytest.mark.parametrize("ms", [2**62, -(2**62)])
def test_a_stored_time_no_calendar_holds_shows_as_its_number(ms: int):
    """A row written into a store directly may hold a time past year 9999 or before year 1:
    a page shows the number rather than failing with a ValueError (a 500)."""
    assert _when(ms) == str(ms)


def test_a_stored_time_shows_in_utc():
    assert _when(0) == "1970-01-01 00:00 UTC"
    assert _when(None) == "never"
