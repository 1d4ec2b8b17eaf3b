"""The errors scopemem raises at its boundaries. A leaf module: every layer may import it."""

from __future__ import annotations


class ScopememError(Exception):
    """Base class for every error scopemem raises on purpose."""


class ConfigError(ScopememError):
    """A configuration value that cannot be used; the message names the key."""


class StoreError(ScopememError):
    """A store could not do what was asked (I/O failure, bad database, refused input)."""


class PluginError(ScopememError):
    """A plugin registered something twice, or something asked for is not installed."""
