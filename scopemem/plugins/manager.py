"""Building the plugin manager: built-ins first, then whatever the environment installed.

``get_plugin_manager()`` loads plugins once per process and hands back the same manager
afterwards; ``new_plugin_manager()`` builds an independent one (tests, embedding). Nothing is
loaded at import time.

Environment:

* ``SCOPEMEM_LOAD_PLUGINS``: comma-separated names of the third-party entry points to load;
  every other third-party entry point is skipped (set but empty: none of them). scopemem's
  own entry points (its stores, the worker server) are built-ins and always load, as llm's
  ``DEFAULT_PLUGINS`` do whatever ``LLM_LOAD_PLUGINS`` says.
* ``SCOPEMEM_DISABLED_PLUGINS``: comma-separated plugin names (entry-point names or the
  built-ins' names, as ``scopemem plugins`` lists them) never to register.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import NotRequired, TypedDict

import pluggy

from scopemem.errors import PluginError
from scopemem.plugins import hookspecs
from scopemem.plugins.markers import PROJECT_NAME

ENTRY_POINT_GROUP = "scopemem"

# Registered before any entry point, under these names.
BUILTIN_PLUGINS: tuple[str, ...] = (
    "scopemem.plugins.builtin_scopes",
    "scopemem.plugins.builtin_gate",
    "scopemem.plugins.builtin_policy",
    "scopemem.cli.builtin_commands",
    "scopemem.cli.builtin_memory_commands",
    "scopemem.cli.builtin_port_commands",
    "scopemem.cli.builtin_scope_commands",
    "scopemem.cli.builtin_stats_commands",
    "scopemem.cli.builtin_health_commands",
    "scopemem.cli.builtin_embedding_commands",
    "scopemem.plugins.builtin_providers",
    "scopemem.plugins.builtin_embedders",
    "scopemem.agent_hooks.plugin",
    "scopemem.mcp.plugin",
)



class PluginManager(pluggy.PluginManager):
    """pluggy's manager, remembering which distribution each entry-point plugin came from."""

    def __init__(self) -> None:
        super().__init__(PROJECT_NAME)
        self.distributions: dict[str, importlib.metadata.Distribution] = {}


log = logging.getLogger("scopemem.plugins")
_lock = threading.Lock()
_shared: PluginManager | None = None


def _names(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [name.strip() for name in value.split(",") if name.strip()]


def new_plugin_manager(
    *,
    environ: Mapping[str, str] | None = None,
    load_entry_points: bool = True,
    extra_plugins: tuple[object, ...] = (),
) -> PluginManager:
    """A fresh manager: hookspecs, built-ins, then entry points (filtered by the
    environment), then ``extra_plugins``. Raises ``PluginError`` on a hookimpl with no spec."""
    env = os.environ if environ is None else environ
    disabled = set(_names(env.get("SCOPEMEM_DISABLED_PLUGINS")) or ())
    only = _names(env.get("SCOPEMEM_LOAD_PLUGINS"))

    pm = PluginManager()
    pm.add_hookspecs(hookspecs)
    for name in disabled:
        pm.set_blocked(name)
    for module_name in BUILTIN_PLUGINS:
        if module_name not in disabled:
            pm.register(importlib.import_module(module_name), name=module_name)
    if load_entry_points:
        _load_entry_points(pm, only, disabled)
    for plugin in extra_plugins:
        _register(pm, plugin, None)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        unknown = [name for name, hook in vars(pm.hook).items() if not name.startswith("_")
                   and not hook.has_spec() and hook.get_hookimpls()]
        raise PluginError(f"plugin {_shown(pm, exc.plugin)!r} implements "
                          f"{', '.join(unknown)}, which is no scopemem hook") from exc
    return pm


def _load_entry_points(
    pm: PluginManager, only: list[str] | None, disabled: set[str]
) -> None:
    seen: set[str] = set()
    entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    # A misspelt or uninstalled name would otherwise start everything without that plugin.
    unknown = sorted(set(only or ()) - set(entry_points.names))
    if unknown:
        log.warning("SCOPEMEM_LOAD_PLUGINS names %s, which no installed plugin has"
                    " (installed: %s)", ", ".join(map(repr, unknown)),
                    ", ".join(sorted(entry_points.names)))
    for entry_point in entry_points:
        name = entry_point.name
        if name in seen or name in disabled or (
                only is not None and name not in only and not _builtin(entry_point)):
            continue
        seen.add(name)
        try:
            plugin = entry_point.load()
        except Exception as exc:  # a broken third-party package must name itself
            raise PluginError(f"plugin {name!r} ({entry_point.value}) failed to load: {exc}")\
                from exc
        _register(pm, plugin, name)
        if entry_point.dist is not None:
            pm.distributions[name] = entry_point.dist


def _register(pm: PluginManager, plugin: object, name: str | None) -> None:
    """Register a third-party plugin. One pluggy refuses (a hookimpl taking an argument its
    hook does not pass) is a ``PluginError`` naming it, on one line: the command line's
    error, not pluggy's traceback."""
    try:
        pm.register(plugin, name=name)
    except pluggy.PluginValidationError as exc:
        # pluggy's first line names the plugin by its id when it has no name; the rest says
        # which hookimpl and why.
        why = "; ".join(line.strip() for line in str(exc).splitlines()[1:] if line.strip())
        raise PluginError(f"plugin {name or type(plugin).__name__!r} cannot be registered: "
                          f"{why}") from exc


def _shown(pm: PluginManager, plugin: object) -> str:
    """A plugin's registered name, or its class's for an object registered without one
    (pluggy names it by its ``id``)."""
    name = pm.get_name(plugin) or ""
    return type(plugin).__name__ if not name or name.isdigit() else name


def _builtin(entry_point: importlib.metadata.EntryPoint) -> bool:
    """Whether scopemem's own distribution advertises the entry point."""
    dist = entry_point.dist
    return dist is not None and dist.metadata["Name"] == PROJECT_NAME


def get_plugin_manager() -> PluginManager:
    """The process's shared manager, built on first use."""
    global _shared
    with _lock:
        if _shared is None:
            _shared = new_plugin_manager()
        return _shared


class PluginRow(TypedDict):
    """One loaded plugin, as ``scopemem plugins`` shows it (``--json``: these keys)."""

    name: str
    hooks: list[str]
    version: NotRequired[str]
    distribution: NotRequired[str]
    module: NotRequired[str]


def plugin_rows(pm: PluginManager) -> list[PluginRow]:
    """What loaded, for ``scopemem plugins``: name, hooks, and the distribution if any."""
    rows: list[PluginRow] = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        hooks = sorted(caller.name for caller in pm.get_hookcallers(plugin) or ())
        row: PluginRow = {"name": name, "hooks": hooks}
        dist = pm.distributions.get(name)
        if dist is not None:
            row["version"] = dist.version
            row["distribution"] = dist.metadata["Name"]
        if isinstance(plugin, ModuleType):
            row["module"] = plugin.__name__
        rows.append(row)
    return sorted(rows, key=lambda row: row["name"])
