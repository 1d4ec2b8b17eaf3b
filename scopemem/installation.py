"""What an installation is configured to run: its plugin tables validated by the plugins that
own them, and its effective settings.

``config.py`` checks the ``[memory]`` table itself; every ``[memory.stores.<name>]`` and
``[memory.providers.<name>]`` table belongs to a plugin, which validates it when its factory
is called. ``check_plugin_tables`` calls each factory once, the way the commands would, and
keeps what each settled on (``OptionsTable.effective``: the options in effect, defaults
included). ``Memory.from_config`` and ``scopemem config check`` both run it, so a
configuration one of them accepts the other accepts too, table for table.

Factories do no I/O (a store opens files or connections on first use, a provider its
session), so a factory built only to validate its table is dropped unused.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from scopemem.config import MemoryConfig
from scopemem.core.secret_rules import redact_secrets
from scopemem.errors import ConfigError, PluginError, ScopememError, StoreError
from scopemem.options import IGNORED
from scopemem.plugins.embedders import EmbedderSettings, check_embedder, embedder_registry
from scopemem.plugins.manager import PluginManager
from scopemem.plugins.providers import (
    ModelRef,
    ProviderSettings,
    check_provider,
    parse_model_ref,
    provider_registry,
)
from scopemem.plugins.registry import Registry
from scopemem.stores.base import Clock, MemoryStore, StoreFactory, StoreSettings, wall_clock_ms
from scopemem.stores.null import NullStore

__all__ = ["PluginTables", "build_store", "check_plugin_tables", "effective_settings",
           "effective_toml", "embeddings_ref", "store_registry"]


def store_registry(pm: PluginManager) -> Registry[StoreFactory]:
    registry: Registry[StoreFactory] = Registry("store", StoreError)
    registry.fill(pm.hook.scopemem_register_stores)
    return registry


def _store_settings(config: MemoryConfig, name: str, environ: Mapping[str, str],
                    clock: Clock, *, allow_fallback: bool = True,
                    validate_only: bool = False) -> StoreSettings:
    return StoreSettings(name=name, options=dict(config.store_options(name)),
                         cap=config.max_records_per_scope,
                         retention_days=config.retention_days,
                         reach_retention_days=config.reach_retention_days,
                         environ=dict(environ), clock=clock,
                         ranking=config.ranking_spec(), allow_fallback=allow_fallback,
                         stand_in=in_process_store, validate_only=validate_only)


def in_process_store(settings: StoreSettings) -> MemoryStore:
    """The in-process store, standing in for a store whose backend is not configured
    (``StoreSettings.stand_in``), with the settings' cap, clock, ranking and retention."""
    from scopemem.stores.memory import InMemoryStore

    return InMemoryStore(cap=settings.cap, clock=settings.clock, ranking=settings.ranking,
                         retention_days=settings.retention_days,
                         reach_retention_days=settings.reach_retention_days)


def build_store(
    config: MemoryConfig,
    pm: PluginManager,
    *,
    environ: Mapping[str, str] | None = None,
    clock: Clock = wall_clock_ms,
    allow_fallback: bool = True,
) -> MemoryStore:
    """The configured store; memory off → a ``NullStore`` and no plugin store is built.
    ``allow_fallback=False`` (a one-shot command) makes a store that would stand in with the
    in-process one (the worker client without its token) refuse instead."""
    if not config.enabled:
        return NullStore()
    registry = store_registry(pm)
    try:
        factory = registry.get(config.store)
    except StoreError as exc:
        raise ConfigError(f"memory.store: {exc}") from None
    refuse = config.fallback == "refuse"
    settings = _store_settings(config, config.store, os.environ if environ is None else environ,
                               clock, allow_fallback=allow_fallback and not refuse)
    try:
        store = factory(settings)
    except ConfigError as exc:
        if refuse and allow_fallback:  # the refusal is the configuration's, not the caller's
            raise ConfigError(f'memory.fallback = "refuse": {exc}') from None
        raise
    missing = [name for name in STORE_METHODS if not callable(getattr(store, name, None))]
    if missing:  # a plugin's bug, named now rather than by every read and write after
        raise PluginError(f"store {config.store!r} built {type(store).__name__}, not a store "
                          f"(it has no {', '.join(missing)})")
    return store


#: The ``MemoryStore`` methods a store factory's answer must have.
STORE_METHODS = ("retrieve", "write", "list", "forget", "sweep", "close")


@attrs.frozen
class PluginTables:
    """Each validated table's options in effect, by plugin name (defaults included)."""

    stores: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    providers: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    embedders: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)


def _effective(given: Mapping[str, Any], recorded: Mapping[str, Any]) -> dict[str, Any]:
    # What the plugin settled on first (its own order), then anything it read by other means;
    # never what it said has no effect.
    merged = {**recorded, **{key: value for key, value in given.items() if key not in recorded}}
    return {key: value for key, value in merged.items() if value is not IGNORED}


def _model_ref(config: MemoryConfig, key: str = "model") -> ModelRef | None:
    value = getattr(config, key)
    if value is None:
        return None
    try:
        return parse_model_ref(value)
    except ValueError as exc:
        raise ConfigError(f"memory.{key}: {exc}") from None


def embeddings_ref(config: MemoryConfig) -> ModelRef | None:
    """The embedder and model ``memory.embeddings`` names (``ConfigError`` naming the key
    when it is not ``<embedder>/<model>``), or None: the semantic lane is off."""
    return _model_ref(config, "embeddings")


def _not_installed(key: str, what: str, name: str, registry: Registry[Any]) -> ConfigError:
    return ConfigError(f"{key}: no {what} {name!r} is installed; installed: "
                       f"{', '.join(registry.names()) or 'none'} (plugin may not be installed)")


def check_plugin_tables(config: MemoryConfig, pm: PluginManager, *,
                        environ: Mapping[str, str] | None = None,
                        clock: Clock = wall_clock_ms) -> PluginTables:
    """Validate every plugin table the configuration has, and the ones it implies: the
    store ``memory.store`` names when memory is on, the provider ``memory.model`` names.
    ``memory.store`` and ``memory.model`` must name installed plugins either way. Raises
    ``ConfigError`` naming the key; returns each table's options in effect."""
    env = os.environ if environ is None else environ
    stores = store_registry(pm)
    if config.store not in stores:
        raise _not_installed("memory.store", "store", config.store, stores)
    store_names = list(config.stores)
    if config.enabled and config.store not in store_names:
        store_names.append(config.store)
    providers = provider_registry(pm)
    provider_names = list(config.providers)
    ref = _model_ref(config)
    if ref is not None:
        if ref.provider not in providers:
            raise _not_installed("memory.model", "provider", ref.provider, providers)
        if ref.provider not in provider_names:
            provider_names.append(ref.provider)

    embedders = embedder_registry(pm)
    embedder_names = list(config.embedders)
    embedding = embeddings_ref(config)
    if embedding is not None:
        if embedding.provider not in embedders:
            raise _not_installed("memory.embeddings", "embedder", embedding.provider,
                                 embedders)
        if embedding.provider not in embedder_names:
            embedder_names.append(embedding.provider)

    def store_settings(name: str) -> StoreSettings:
        return _store_settings(config, name, env, clock, validate_only=True)

    def provider_settings(name: str) -> ProviderSettings:
        return ProviderSettings(name=name, options=dict(config.provider_options(name)),
                                environ=dict(env))

    def embedder_settings(name: str) -> EmbedderSettings:
        return EmbedderSettings(name=name, options=dict(config.embedder_options(name)),
                                environ=dict(env))

    # A store built only to validate its table may answer anything (its result is dropped);
    # a provider or an embedder is built the same way either time, so it is checked here.
    return PluginTables(stores=_check_tables("store", stores, store_names, store_settings),
                        providers=_check_tables("provider", providers, provider_names,
                                                provider_settings, check_provider),
                        embedders=_check_tables("embedder", embedders, embedder_names,
                                                embedder_settings, check_embedder))


def _check_tables(what: str, registry: Registry[Any], names: list[str],
                  settings_for: Callable[[str], StoreSettings | ProviderSettings
                                                | EmbedderSettings],
                  check: Callable[[str, Any], object] | None = None,
                  ) -> dict[str, dict[str, Any]]:
    """Each named table validated by its plugin's factory (and what it built by ``check``,
    given the name), and its options in effect."""
    checked: dict[str, dict[str, Any]] = {}
    for name in names:
        settings = settings_for(name)
        if name not in registry:
            raise _not_installed(f"memory.{settings.TABLE}.{name}", what, name, registry)
        built = _call(registry.get(name), settings)
        if check is not None:
            check(name, built)
        checked[name] = _effective(settings.options, settings.effective)
    return checked


def _call(factory: Any, settings: StoreSettings | ProviderSettings | EmbedderSettings
          ) -> Any:
    """Build a plugin only to validate its table; a plugin's own error names the key, any
    other failure is named after the table."""
    try:
        return factory(settings)
    except ScopememError:
        raise
    except Exception as exc:  # a third-party factory's bug must still name its table
        raise ConfigError(f"memory.{settings.TABLE}.{settings.name}: the plugin refused its "
                          f"table: {type(exc).__name__}: {exc}") from None


def _plain(value: Any) -> Any:
    """A value TOML can hold: tuples as lists, strings with any secret redacted."""
    if isinstance(value, str):
        return redact_secrets(value)
    if attrs.has(type(value)):  # a nested settings table ([memory.hooks])
        return _plain(attrs.asdict(value, recurse=False))
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items() if item is not None}
    if attrs.has(type(value)):  # a settings table of its own, such as [memory.mcp]
        return _plain(attrs.asdict(value))
    return value


def effective_settings(config: MemoryConfig, tables: PluginTables) -> dict[str, Any]:
    """The configuration as it takes effect, shaped like the file: ``{"memory": {…}}`` with
    every ``[memory]`` key (defaults included; unset optional keys left out) and each
    validated plugin table with its options in effect."""
    memory = {field.name: getattr(config, field.name) for field in attrs.fields(MemoryConfig)
              if field.name not in ("stores", "providers", "embedders")}
    table = _plain(memory)
    if tables.stores:
        table["stores"] = _plain(tables.stores)
    if tables.providers:
        table["providers"] = _plain(tables.providers)
    if tables.embedders:
        table["embedders"] = _plain(tables.embedders)
    return {"memory": table}


def effective_toml(config: MemoryConfig, tables: PluginTables) -> str:
    """``effective_settings`` as a TOML document (it loads back as the same configuration)."""
    import tomli_w  # only the command that prints it pays for the writer

    return tomli_w.dumps(effective_settings(config, tables))
