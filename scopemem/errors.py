"""The errors scopemem raises at its boundaries. A leaf module: every layer may import it."""

from __future__ import annotations


class ScopememError(Exception):
    """Base class for every error scopemem raises on purpose."""


class ConfigError(ScopememError):
    """A configuration value that cannot be used; the message names the key."""


class StoreError(ScopememError):
    """A store could not do what was asked (I/O failure, bad database, refused input)."""

    #: Records an import wrote before it failed (the worker client sends one in pages of
    #: ``MAX_IMPORT_BATCH``, each written whole); 0 when it wrote none.
    imported: int = 0


class StoreRefused(StoreError):
    """A store refused the input itself (the worker answered 400 or 413): the same call
    would be refused again, though a smaller one may not be."""


class StoreUnsupported(StoreError):
    """The store has no such capability (the null store cannot export or import records):
    asking again will not help. The worker answers 501."""


class StoreBusy(StoreError):
    """The store cannot take the call now (out of file descriptors, say): the same call may
    succeed shortly. The worker answers 503 with ``Retry-After``."""


class StoreUnreachable(StoreBusy):
    """The store cannot reach its database server now (refused, down, a refused login): busy
    to a caller (503, retried), and not ready to a probe."""


class ScopeLimitReached(StoreError):
    """A write would create a scope beyond the operator's limit on scopes per data directory
    (``max_scopes``): nothing was written. The worker answers it with 507; writes to scopes
    that exist already still succeed."""


class PluginError(ScopememError):
    """A plugin registered something twice, or something asked for is not installed."""
