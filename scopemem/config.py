"""Configuration: the ``[memory]`` table of a TOML file, or a dict of the same shape.

Every mistake names its key: an unknown key, a wrong type or an out-of-range value is a
``ConfigError``. One value is forgiving by design: ``max_records_per_scope`` logs one
warning naming the key and its range, and is clamped to 10000 above it, or takes the default
(500) below 1 or when it is not an integer, because a typo there must neither evict
everything (0) nor make every write fail (> 10000).

This module reads a file or a dict into the table; what each key means and the rules its
value keeps are ``config_table``.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from scopemem.config_table import (
    MAX_HOOK_TIMEOUT,
    HooksConfig,
    McpSettings,
    MemoryConfig,
    TracingConfig,
    check_config,
)
from scopemem.core.records import DEFAULT_SCOPE_CAP, MAX_SCOPE_CAP
from scopemem.errors import ConfigError

if TYPE_CHECKING:
    import cattrs

# The table's shape and checks live in ``config_table``; callers import them from here.
__all__ = ["CONFIG_ENV", "DEFAULT_CONFIG_FILE", "MAX_HOOK_TIMEOUT", "HooksConfig",
           "McpSettings", "MemoryConfig", "TracingConfig", "config_file",
           "config_from_mapping", "load_config"]

log = logging.getLogger("scopemem")

DEFAULT_CONFIG_FILE = "scopemem.toml"
CONFIG_ENV = "SCOPEMEM_CONFIG"
#: A configuration file is a few kilobytes; past this it is something else (``/dev/zero``).
MAX_CONFIG_BYTES = 1024 * 1024


def _strict(kind: type) -> Any:
    def hook(value: Any, _type: Any) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise TypeError(f"expected {kind.__name__}, got a boolean")
        if not isinstance(value, kind):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__} {value!r}")
        return value

    return hook


def _number(value: Any, _type: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {type(value).__name__} {value!r}")
    return float(value)


def _table(value: Any, _type: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a table, got {type(value).__name__}")
    for name, options in value.items():
        if not isinstance(options, Mapping):
            raise TypeError(f"[{name}] must be a table, got {type(options).__name__}")
    return {str(name): dict(options) for name, options in value.items()}


def _string_list(value: Any, _type: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise TypeError(f"expected a list of strings, got {type(value).__name__}")
    if not all(isinstance(item, str) for item in value):
        raise TypeError("expected a list of strings")
    return tuple(value)


@functools.cache
def _converter() -> cattrs.Converter:
    """The configuration's converter, built when a configuration is first read (not when a
    command that reads none, ``--help``, starts)."""
    import cattrs

    converter = cattrs.Converter(forbid_extra_keys=True)
    for kind in (str, int, bool):
        converter.register_structure_hook(kind, _strict(kind))
    converter.register_structure_hook(float, _number)
    tables, strings = Mapping[str, Mapping[str, Any]], tuple[str, ...]
    converter.register_structure_hook_func(lambda t: t == tables, _table)
    converter.register_structure_hook_func(lambda t: t == strings, _string_list)
    return converter


def _format(exc: BaseException, _type: Any) -> str:
    import cattrs

    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"unknown key(s): {', '.join(sorted(exc.extra_fields))}"
    return str(exc)


def _path_first(message: str) -> str:
    # cattrs writes "problem @ path"; a person reads "path: problem" faster.
    problem, _, path = message.rpartition(" @ ")
    return f"{path}: {problem}" if path else message


def config_from_mapping(data: Mapping[str, Any], *, source: str = "config") -> MemoryConfig:
    """Validate a dict shaped like the TOML file (``{"memory": {...}}``)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a table with a [memory] section")
    unknown = sorted(set(data) - {"memory"})
    if unknown:
        raise ConfigError(f"{source}: unknown top-level key {unknown[0]!r} (expected [memory])")
    table = data.get("memory", {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"{source}: memory must be a table")
    table = dict(table)
    if not isinstance(table.get("hooks", {}), Mapping):
        raise ConfigError(f"{source}: memory.hooks must be a table")
    if not isinstance(table.get("mcp", {}), Mapping):
        raise ConfigError(f"{source}: memory.mcp must be a table")
    if not isinstance(table.get("tracing", {}), Mapping):
        raise ConfigError(f"{source}: memory.tracing must be a table")
    cap = _scope_cap(table.pop("max_records_per_scope", DEFAULT_SCOPE_CAP))
    import cattrs

    try:
        config = _converter().structure(table, MemoryConfig)
    except cattrs.BaseValidationError as exc:
        messages = cattrs.transform_error(exc, path="memory", format_exception=_format)
        raise ConfigError("; ".join(_path_first(message) for message in messages)) from None
    config = attrs.evolve(config, max_records_per_scope=cap)
    check_config(config)
    return config


def _scope_cap(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_SCOPE_CAP:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_SCOPE_CAP:
        # Asked for more than any store keeps: the most there is, not the default's 500.
        log.warning("[memory] memory.max_records_per_scope must be an integer from 1 to %d, "
                    "got %r; clamped to %d", MAX_SCOPE_CAP, value, MAX_SCOPE_CAP)
        return MAX_SCOPE_CAP
    log.warning(
        "[memory] memory.max_records_per_scope must be an integer from 1 to %d, got %r; "
        "using the default %d", MAX_SCOPE_CAP, value, DEFAULT_SCOPE_CAP,
    )
    return DEFAULT_SCOPE_CAP


def load_config(source: str | os.PathLike[str] | Mapping[str, Any] | MemoryConfig | None = None,
                environ: Mapping[str, str] | None = None) -> MemoryConfig:
    """The configuration from a file path, a dict, an existing config, or (``None``) the
    default search: ``$SCOPEMEM_CONFIG`` (of ``environ``, else the process's environment),
    else ``./scopemem.toml`` when it exists, else the defaults (memory off)."""
    if isinstance(source, MemoryConfig):
        return source
    if isinstance(source, Mapping):
        return config_from_mapping(source)
    source = config_file(source, environ)
    if source is None:
        return MemoryConfig()
    path = Path(source)
    return config_from_mapping(_read_toml(path), source=str(path))


def config_file(source: str | os.PathLike[str] | None = None,
                environ: Mapping[str, str] | None = None) -> str | None:
    """The file ``load_config(source, environ)`` reads: ``source``, else
    ``$SCOPEMEM_CONFIG`` (of ``environ``, else the process's environment), else
    ``./scopemem.toml`` when it exists; None when there is none (the defaults)."""
    if source is not None:
        return os.fspath(source)
    env = (os.environ if environ is None else environ).get(CONFIG_ENV)
    if env:
        return env
    return DEFAULT_CONFIG_FILE if Path(DEFAULT_CONFIG_FILE).is_file() else None


def _read_toml(path: Path) -> dict[str, Any]:
    """The TOML table of one file; every way a file can fail to be one (missing, a
    directory, endless, not UTF-8, nested past the parser's depth) is one ``ConfigError``."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such configuration file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a configuration file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES // 2**20} MiB, "
                          "not a configuration file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} on line "
                          f"{line}); a TOML file is UTF-8") from None
    import tomllib  # a command that reads no file (``--help``) does not load the parser

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except RecursionError:  # tomllib recurses once per level of nested arrays and tables
        raise ConfigError(f"{path}: nested too deeply to be a configuration file") from None
