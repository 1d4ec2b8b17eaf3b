"""What each coding session has handed to reflection, so nothing is reflected twice.

``Stop`` fires after every reply and ``SessionEnd`` once more at the end, each with the same
transcript. The ledger keeps, per session, the byte offset of the transcript up to which
reflection was already started (``claimed``) and up to which it has finished
(``finished``). A hook claims the part after ``claimed`` under a file lock, so two hooks
firing together cannot both claim it, and hands exactly that part to reflection. A part too
small to reflect (no tool call, few turns) is not claimed: it is reflected with what
follows it. A part whose reflection lost writes to a store that could not be reached is
released (``claimed`` goes back to its start) so the next hook reflects it again, at most
``MAX_RETRIES`` times (``retries`` counts them); then it is given up.

One small JSON file a session under ``<state_dir>/sessions/``, named by a hash of the
session id (an id is input; a file name must not be). A file that cannot be read as a
ledger counts as a fresh session.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs

if sys.platform != "win32":
    import fcntl

log = logging.getLogger("scopemem")

#: How many times a part whose writes found the store down is handed to reflection again.
MAX_RETRIES = 3


@attrs.frozen
class SessionState:
    transcript: str = ""
    claimed: int = 0
    finished: int = 0
    retries: int = 0


class Ledger:
    """The sessions' states under one directory (created on first write)."""

    def __init__(self, state_dir: Path) -> None:
        self.directory = state_dir / "sessions"

    def _path(self, session_id: str) -> Path:
        digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:40]
        return self.directory / f"{digest}.json"

    @contextlib.contextmanager
    def locked(self, session_id: str) -> Iterator[None]:
        """Hold the session's lock (an advisory ``flock``; on Windows, none)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        lock_path = self._path(session_id).with_suffix(".lock")
        with open(lock_path, "a+b") as handle:
            if sys.platform != "win32":
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                if sys.platform != "win32":
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def read(self, session_id: str) -> SessionState:
        try:
            data = json.loads(self._path(session_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return SessionState()
        if not isinstance(data, dict):
            return SessionState()
        transcript, claimed, finished, retries = (
            data.get("transcript"), data.get("claimed"), data.get("finished"),
            data.get("retries", 0))
        numbers = [n for n in (claimed, finished, retries)
                   if isinstance(n, int) and not isinstance(n, bool) and n >= 0]
        if not isinstance(transcript, str) or len(numbers) != 3:
            return SessionState()
        return SessionState(transcript, *numbers)

    def write(self, session_id: str, state: SessionState) -> None:
        """Replace the session's state whole (a crash leaves the old one or the new one)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self._path(session_id)
        fd, temp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(attrs.asdict(state), handle)
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise

    def finish(self, session_id: str, end: int) -> None:
        """Note that reflection of the transcript up to ``end`` has finished (well or not)."""
        with self.locked(session_id):
            state = self.read(session_id)
            retries = 0 if state.claimed == end else state.retries
            self.write(session_id, attrs.evolve(state, finished=max(state.finished, end),
                                                retries=retries))

    def release(self, session_id: str, transcript: str, start: int, end: int) -> None:
        """Hand bytes ``start``-``end`` back for the next hook to reflect, their writes having
        found the store down; after ``MAX_RETRIES`` releases the part is given up. A part
        followed by one already handed off cannot go back (the later part would be
        reflected twice): it is given up too. Each give-up is one log line."""
        with self.locked(session_id):
            state = self.read(session_id)
            if state.transcript != transcript or state.claimed != end:
                log.warning("[memory] hooks: bytes %d-%d of session %s lost their writes and "
                            "cannot be reflected again (a later part was handed off)",
                            start, end, session_id[:40])
            elif state.retries >= MAX_RETRIES:
                log.warning("[memory] hooks: bytes %d-%d of session %s lost their writes %d "
                            "times; given up", start, end, session_id[:40],
                            state.retries + 1)
            else:
                log.info("[memory] hooks: bytes %d-%d of session %s lost their writes; "
                         "released for the next hook (retry %d of %d)", start, end,
                         session_id[:40], state.retries + 1, MAX_RETRIES)
                self.write(session_id, attrs.evolve(state, claimed=start,
                                                    retries=state.retries + 1))
                return
            self.write(session_id, attrs.evolve(state, finished=max(state.finished, end),
                                                retries=0))
