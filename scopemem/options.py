"""Plugin option tables: ``[memory.stores.<name>]``, ``[memory.providers.<name>]``.

Each plugin validates its own table. These helpers make every plugin's mistakes read the
same way: a ``ConfigError`` that starts with the dotted key (``memory.stores.sqlite.path:``)
and says what was expected. A leaf module: it imports nothing of the project but its errors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import attrs

from scopemem.errors import ConfigError

T = TypeVar("T", bound="OptionsTable")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
T_Value = TypeVar("T_Value")
#: ``effective``'s value for an option that is set but has no effect (``OptionsTable.ignore``).
IGNORED = object()


@attrs.frozen(kw_only=True)
class OptionsTable:
    """A plugin's name, its options table and the environment (for secrets the options name
    by variable, never by value).

    Every helper below records the value it settled on, default or given, in ``effective``
    (``record`` does it for an option a plugin reads by hand), so ``scopemem config check``
    can print each plugin's settings in effect, defaults included, without knowing them."""

    TABLE: ClassVar[str] = "plugins"

    name: str = ""
    options: Mapping[str, Any] = attrs.field(factory=dict)
    environ: Mapping[str, str] = attrs.field(factory=dict)
    # Shared, not copied, by ``named`` and ``attrs.evolve``: one table, one record.
    effective: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    def record(self, key: str, value: T_Value) -> T_Value:
        """Note ``value`` as option ``key``'s setting in effect, and return it."""
        self.effective[key] = value
        return value

    def ignore(self, key: str) -> None:
        """Note option ``key`` as set but of no effect (a retired option, warned about):
        ``scopemem config check`` leaves it out of the settings in effect."""
        self.effective[key] = IGNORED

    def named(self: T, default: str) -> T:
        """The same settings, named ``default`` when built without a name (direct use)."""
        return self if self.name else attrs.evolve(self, name=default)

    def option_key(self, key: str) -> str:
        """The dotted configuration key of one option, for error messages."""
        return f"memory.{self.TABLE}.{self.name or '<name>'}.{key}"

    def unknown_options(self, known: Sequence[str]) -> None:
        """Raise ``ConfigError`` naming the first option not in ``known``."""
        unknown = sorted(set(self.options) - set(known))
        if unknown:
            raise ConfigError(
                f"{self.option_key(unknown[0])}: unknown option"
                f" (known: {', '.join(known) or 'none'})"
            )

    def string_option(self, key: str, default: str) -> str:
        """A non-empty string option, or ``default`` when absent."""
        value = self.options.get(key, default)
        if not isinstance(value, str):
            raise ConfigError(
                f"{self.option_key(key)}: expected a string, got {type(value).__name__}"
            )
        if not value.strip():
            raise ConfigError(f"{self.option_key(key)}: must not be empty")
        return self.record(key, value)

    def env_name_option(self, key: str, default: str, holds: str) -> str:
        """The name of the environment variable that holds a secret (``holds``: "the key",
        "the token"), or ``default`` when absent. A value that cannot be a variable's name is
        refused without repeating it: the usual slip is the secret itself pasted there."""
        value = self.string_option(key, default)
        if not _ENV_NAME.match(value):
            raise ConfigError(
                f"{self.option_key(key)}: expected the name of an environment variable"
                f" (letters, digits and underscores), not {holds} itself"
            )
        return value

    def choice_option(self, key: str, default: str, choices: Sequence[str]) -> str:
        """One of ``choices`` (case-insensitive; returned lower-cased), or ``default``."""
        value = self.options.get(key, default)
        if not isinstance(value, str) or value.lower() not in choices:
            raise ConfigError(
                f"{self.option_key(key)}: expected one of {', '.join(choices)}, got {value!r}"
            )
        return self.record(key, value.lower())

    def int_option(self, key: str, default: int, low: int, high: int | None = None) -> int:
        """A whole number in [low, high], or ``default`` when absent."""
        value = self.options.get(key, default)
        if (isinstance(value, bool) or not isinstance(value, int) or value < low
                or (high is not None and value > high)):
            bound = f"from {low} to {high}" if high is not None else f"of at least {low}"
            raise ConfigError(
                f"{self.option_key(key)}: expected a whole number {bound}, got {value!r}"
            )
        return self.record(key, value)

    def positive_number_option(self, key: str, default: float,
                               high: float | None = None) -> float:
        """A finite number above zero (and at most ``high``), or ``default``."""
        value = self.options.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(
                f"{self.option_key(key)}: expected a positive number, "
                f"got {type(value).__name__} {value!r}"
            )
        if not math.isfinite(value) or value <= 0 or (high is not None and value > high):
            limit = f" at most {high}" if high is not None else ""
            raise ConfigError(
                f"{self.option_key(key)}: must be a positive number{limit}, got {value!r}"
            )
        return self.record(key, float(value))
