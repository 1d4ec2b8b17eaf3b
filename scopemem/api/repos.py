"""A request's repository, which may be an awaitable still resolving when the read starts:
awaited once per awaitable, whoever asks first (the read path, reflection), and the answer
shared. A bare coroutine can be awaited only once, and a second await that failed would
cost the run its repository scope and send its repository facts to org.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import weakref
from collections.abc import Awaitable
from typing import Any

from scopemem.gitremote import typed_repo

__all__ = ["RepoAnswers"]

log = logging.getLogger("scopemem")


def _checked(value: str) -> str | None:
    """``value`` when it is ``owner/name`` as a clone's remote names it, else one warning
    and None: a URL, a ``.git`` suffix or a bare name is a scope no run in the clone reads
    (the hooks and the MCP server name it ``repo:owner/name``). The value itself is never
    repeated: a remote URL may hold a token."""
    if not value:
        return None
    ok, named = typed_repo(value)
    if not ok:
        log.warning("[memory] request.repo is not owner/name as a clone's remote names it "
                    "(%s); reading without the repo scope",
                    f"it names {named}: pass that" if named else "e.g. acme/api")
        return None
    return value


class RepoAnswers:
    """Each awaitable repository's one answer."""

    def __init__(self) -> None:
        # An awaitable request.repo → the one future its answer lands in. Weak keys: an
        # entry lasts as long as the request holding the awaitable.
        self._answers: weakref.WeakKeyDictionary[Any, asyncio.Future[Any]] = (
            weakref.WeakKeyDictionary())
        self._resolutions: set[asyncio.Task[None]] = set()  # running, so not collected

    async def resolve(self, repo: str | Awaitable[str | None] | None,
                      wait: float | None = None) -> str | None:
        """``owner/name`` or ``None`` (one warning for a string that is not ``owner/name``,
        see ``_checked``). An awaitable is awaited once, whoever asks first; every
        later call for the same awaitable (reflection after the read path, say) gets the
        same answer. A failure is one warning and no repo scope, never an error. ``wait``
        bounds this call's wait (seconds; ``memory.repo_wait_seconds`` on the read path):
        past it, one warning and no repo scope, while the awaitable goes on for later
        callers."""
        if repo is None or isinstance(repo, str):
            return _checked(repo or "")
        if not inspect.isawaitable(repo):
            log.warning("[memory] request.repo is neither a string nor awaitable; no repo scope")
            return None
        answer = self._answer(repo)
        try:
            # Shielded: a read cancelled while it waits must not cancel the resolution
            # itself (another caller may be waiting for it, or come later).
            value = await asyncio.wait_for(asyncio.shield(answer), wait)
        except TimeoutError:
            log.warning("[memory] repo resolution took longer than %g s "
                        "(memory.repo_wait_seconds); reading without the repo scope", wait)
            return None
        except asyncio.CancelledError:
            if not answer.cancelled():
                raise
            log.warning("[memory] repo resolution was cancelled; reading without the repo "
                        "scope")
            return None
        except Exception as exc:
            log.warning("[memory] repo resolution failed (%s); reading without the repo scope",
                        type(exc).__name__)
            return None
        if value is not None and not isinstance(value, str):
            log.warning("[memory] repo resolution answered a %s, not an owner/name string; "
                        "reading without the repo scope", type(value).__name__)
            return None
        return _checked(value or "")

    def _answer(self, repo: Awaitable[Any]) -> asyncio.Future[Any]:
        """The future ``repo``'s answer lands in, awaiting it (once) if nobody has yet."""
        try:
            answer = self._answers.get(repo)
        except TypeError:  # neither hashable nor weakly referable: it cannot be shared
            answer = None
        if answer is not None:
            return answer
        answer = asyncio.get_running_loop().create_future()

        async def settle() -> None:
            try:
                value = await repo
            except asyncio.CancelledError:
                answer.cancel()
            except Exception as exc:
                answer.set_exception(exc)
            else:
                answer.set_result(value)

        # The future holds only the answer, never the awaitable (the task that awaits it is
        # dropped when done), so the weak key lasts exactly as long as the request.
        task = asyncio.ensure_future(settle())
        self._resolutions.add(task)
        task.add_done_callback(self._resolutions.discard)
        with contextlib.suppress(TypeError):
            self._answers[repo] = answer
        return answer
