"""The Memory Worker: an aiohttp server that serves any ``MemoryStore`` to remote clients.

``create_app(store, token)`` builds the application; ``scopemem serve`` (``plugin.py``) runs it.
aiohttp is imported only when one of the names below is used, so loading the plugin list (which
imports ``plugin.py`` and therefore this package) stays cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT_MAX_BODY", "WorkerRunner", "create_app", "running", "serve_until_signalled"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from scopemem.worker_aiohttp import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
