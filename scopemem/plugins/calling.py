"""Calling a hook one plugin at a time, so a plugin that raises is named.

pluggy calls every implementation in one go, and an exception leaves no trace of whose it
was. The host (``plugins.host``), the registries plugins fill (stores, providers, embedders)
and the command line call each implementation themselves instead, and turn a raise into a
``PluginError`` naming the plugin and the hook.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

from scopemem.errors import PluginError


def hook_answers(caller: pluggy.HookCaller, *, firstresult: bool = False,
                 after: Callable[[str], None] | None = None, **kwargs: Any
                 ) -> list[tuple[str, Any]]:
    """Each plugin's answer that is not ``None``, by plugin name, in pluggy's call order
    (only the first with ``firstresult``); ``after(name)`` runs after each plugin's call. A
    plugin that raises is a ``PluginError`` naming it and the hook, its exception chained."""
    impls = caller.get_hookimpls()
    if any(impl.hookwrapper or impl.wrapper for impl in impls):  # pluggy runs a wrapper
        try:
            answers = caller(**kwargs)
        except Exception as exc:
            raise failed(caller.name, "a plugin", exc) from exc
        if after is not None:
            after("a plugin")
        answers = [answers] if firstresult else answers
        return [("a plugin", answer) for answer in answers if answer is not None]
    found: list[tuple[str, Any]] = []
    for impl in reversed(impls):
        try:
            answer = impl.function(*[kwargs[name] for name in impl.argnames])
        except PluginError:  # the host's own refusal (a name registered twice), as it is
            raise
        except Exception as exc:
            raise failed(caller.name, f"plugin {plugin_name(impl)!r}", exc) from exc
        if after is not None:
            after(plugin_name(impl))
        if answer is not None:
            found.append((plugin_name(impl), answer))
            if firstresult:
                break
    return found


def plugin_name(impl: pluggy.HookImpl) -> str:
    """The name a plugin was registered under, or its class's for an object registered
    without one (pluggy names it by its ``id``)."""
    name = impl.plugin_name
    return type(impl.plugin).__name__ if name.isdigit() else name


def failed(hook: str, who: str, exc: Exception) -> PluginError:
    return PluginError(f"{who} failed in {hook}: {type(exc).__name__}: {exc}")
