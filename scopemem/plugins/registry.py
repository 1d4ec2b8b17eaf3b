"""Name → factory registries that plugins fill through ``register`` callbacks."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from scopemem.errors import PluginError, ScopememError
from scopemem.plugins.calling import hook_answers

if TYPE_CHECKING:
    import pluggy

F = TypeVar("F", bound=Callable[..., object])


class Registry(Generic[F]):
    """Factories by name. A duplicate name is refused loudly (two plugins fighting over one
    name is a packaging mistake that must not be settled silently by load order); an unknown
    name's error lists what is installed."""

    def __init__(self, what: str, error: type[ScopememError] = PluginError) -> None:
        self.what = what
        self._error = error
        self._factories: dict[str, F] = {}

    def register(self, name: str, factory: F) -> None:
        if not isinstance(name, str) or not name:
            raise PluginError(f"a {self.what} needs a non-empty name, got {name!r}")
        if not callable(factory):
            raise PluginError(f"{self.what} {name!r}: the factory is not callable")
        if name in self._factories:
            raise PluginError(f"{self.what} {name!r} is registered twice")
        self._factories[name] = factory

    def fill(self, caller: pluggy.HookCaller) -> None:
        """Let every plugin of the ``scopemem_register_*`` hook ``caller`` register; one that
        raises is a ``PluginError`` naming it (every command builds these registries)."""
        hook_answers(caller, register=self.register)

    def get(self, name: str) -> F:
        try:
            return self._factories[name]
        except KeyError:
            installed = ", ".join(self.names()) or "none"
            raise self._error(
                f"unknown {self.what} {name!r}; installed: {installed} "
                "(plugin may not be installed)"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._factories)

    def __contains__(self, name: object) -> bool:
        return name in self._factories
