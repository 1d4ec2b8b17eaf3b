"""Configuration: the ``[memory]`` table of a TOML file, or a dict of the same shape.

Every mistake names its key: an unknown key, a wrong type or an out-of-range value is a
``ConfigError``. One value is forgiving by design: ``max_records_per_scope`` logs one
warning naming the key and its range, and is clamped to 10000 above it, or takes the default
(500) below 1 or when it is not an integer, because a typo there must neither evict
everything (0) nor make every write fail (> 10000).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from scopemem.core.browse import DEFAULT_REACH_RETENTION_DAYS, MAX_REACH_RETENTION_DAYS
from scopemem.core.records import (
    DEFAULT_RETENTION_DAYS,
    DEFAULT_SCOPE_CAP,
    MAX_LIMIT,
    MAX_RETENTION_DAYS,
    MAX_SCOPE_CAP,
    MIN_BLOCK_TOKENS,
)
from scopemem.core.scopes import scope_key_problem
from scopemem.errors import ConfigError

if TYPE_CHECKING:
    import cattrs

    from scopemem.core.ranking import Ranking

log = logging.getLogger("scopemem")

DEFAULT_CONFIG_FILE = "scopemem.toml"
# The least cap a worker client may ask for (``memory.min_records_per_scope``).
DEFAULT_CAP_FLOOR = 100
RANKINGS = ("weighted", "seed")
FALLBACKS = ("in-process", "refuse")
CONFIG_ENV = "SCOPEMEM_CONFIG"
#: A configuration file is a few kilobytes; past this it is something else (``/dev/zero``).
MAX_CONFIG_BYTES = 1024 * 1024
#: The origins a surface may stamp its runs with (``core.policy.Visibility``'s values).
VISIBILITIES = ("public", "private", "dm", "machine")
#: Claude Code's own default hook timeout is 60 s; a hook allowed longer would be killed.
MAX_HOOK_TIMEOUT = 60.0
#: Claude Code shows the model about 10,000 characters of a hook's additional context (the
#: rest only as a short preview); a hook's block stays under that by default.
DEFAULT_HOOK_CHARS = 9000


@attrs.frozen(kw_only=True)
class HooksConfig:
    """``[memory.hooks]``: how ``scopemem hook <event>`` (coding-agent hooks) reads and
    reflects. The person is ``user:<platform>:<subject>``; ``subject`` absent means the
    login name of whoever runs the agent. ``timeout`` bounds a hook's store reads (seconds);
    ``visibility`` stamps the sessions' origin for the write policy (a local session is one
    person's conversation: ``dm``); ``state_dir`` holds what was reflected and the log
    (default ``$XDG_STATE_HOME/scopemem/hooks``, else ``~/.local/state/scopemem/hooks``).
    ``max_chars`` bounds the block a hook prints, under ``max_tokens`` too."""

    platform: str = "claude-code"
    subject: str | None = None
    timeout: float = 3.0
    max_chars: int = DEFAULT_HOOK_CHARS
    visibility: str = "dm"
    state_dir: str | None = None


@attrs.frozen(kw_only=True)
class McpSettings:
    """``[memory.mcp]``: who the MCP server (``scopemem mcp``) acts for. Its clients never
    name an identity: every call is the configured ``subject``'s (``user:mcp:<subject>``),
    reading and writing the configured repository and channel. ``visibility`` is the origin
    its sessions' reflections are stamped with; ``dm`` (one person with an agent) keeps an
    organisation-wide lesson in the person's own scope unless an admin widens it."""

    subject: str = "local"
    repo: str | None = None
    channel: str | None = None
    visibility: str = "dm"


@attrs.frozen(kw_only=True)
class TracingConfig:
    """``[memory.tracing]``: what spans may say (docs/memory.md "Tracing"). ``scope_keys``
    adds each scope's key (``scope.key``, which may name a person) beside its kind."""

    scope_keys: bool = False


@attrs.frozen(kw_only=True)
class MemoryConfig:
    """The effective settings. Defaults leave memory off: no store, prompts untouched."""

    enabled: bool = False
    organization: str | None = None
    store: str = "sqlite"
    model: str | None = None
    limit: int = 32
    max_tokens: int = 3000
    repo_window: int = 24
    max_records_per_scope: int = DEFAULT_SCOPE_CAP
    # The Memory Worker's floor under a client's ``cap``: a client may lower the cap of its
    # writes from ``max_records_per_scope`` down to this, never below (nor raise it). Above
    # ``max_records_per_scope`` it is that cap: clients cannot lower it at all.
    min_records_per_scope: int = DEFAULT_CAP_FLOOR
    # Days a superseded, evicted or swept record keeps its text before the store purges it
    # (deletes a superseded or evicted row; scrubs a swept one's text and keeps the row);
    # 0 purges it at once (with the write that retires it). Forgotten records are scrubbed
    # at once whatever this says.
    retention_days: int = DEFAULT_RETENTION_DAYS
    # Days a reach (which record a block showed to which run, for the Memory Hub) is kept;
    # 0 keeps none (docs/memory.md "Which runs a record reached").
    reach_retention_days: int = DEFAULT_REACH_RETENTION_DAYS
    admins: tuple[str, ...] = ()
    no_reflect_agents: tuple[str, ...] = ("review", "ship")
    # The status gate (003): a fact carrying a status or change-description marker is never
    # written. False lets such facts through (other plugins' markers still apply).
    gate: bool = True
    # Ranking (docs/memory.md "How ranking works"): the languages whose function words a
    # query drops and whose stemmers fold inflections (every listed one, per script);
    # "weighted" weighs rare words above common ones, "seed" is the seed's plain share.
    languages: tuple[str, ...] = ("english",)
    ranking: str = "weighted"
    # The least keyword match a record needs to be injected as a keyword hit (the window
    # needs none): a brief with nothing relevant gets the window and nothing else.
    min_match: float = 0.0
    # The semantic lane (docs/memory.md "The semantic lane"): "<embedder>/<model>" turns it
    # on; a record is then relevant by a keyword match or by a cosine of at least the floor
    # (a model's own scale: 0.4 chosen for all-MiniLM-L6-v2, higher for e5's).
    embeddings: str | None = None
    embeddings_floor: float = 0.4
    # What a long-running process (a bot) does when its durable store cannot be had (the
    # worker client without its token): "in-process" stands in with the in-process store
    # and one warning (its records die with the process); "refuse" makes it an error at
    # startup, as is a worker that does not answer then (``Memory.from_config``).
    fallback: str = "in-process"
    stores: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    providers: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    embedders: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    hooks: HooksConfig = attrs.field(factory=HooksConfig)
    mcp: McpSettings = attrs.field(factory=McpSettings)
    tracing: TracingConfig = attrs.field(factory=TracingConfig)

    def ranking_spec(self) -> Ranking:
        """The ``Ranking`` these settings name (``_check_ranges`` has validated them)."""
        from scopemem.core.ranking import SEED, Ranking
        from scopemem.languages import analyzer_for

        if self.ranking == "seed":
            return SEED
        return Ranking(analyzer_for(self.languages))

    def cap_floor(self) -> int:
        """The floor the worker applies to a client's cap, never above the default cap."""
        return min(self.min_records_per_scope, self.max_records_per_scope)

    def store_options(self, name: str) -> Mapping[str, Any]:
        return self.stores.get(name, {})

    def provider_options(self, name: str) -> Mapping[str, Any]:
        return self.providers.get(name, {})

    def embedder_options(self, name: str) -> Mapping[str, Any]:
        return self.embedders.get(name, {})


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
    _check_ranges(config)
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


def _in_range(key: str, value: int, low: int, high: int | None, why: str = "") -> None:
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise ConfigError(f"memory.{key}: must be {bound}{why}, got {value}")


def _check_ranges(config: MemoryConfig) -> None:
    # The ranking's words and stemmers: loaded when a configuration is, not with this module.
    from scopemem.languages import available_languages, check_languages

    _in_range("limit", config.limit, 1, MAX_LIMIT)
    # Below the floor the prefix naming the scopes can leave no room for even a cut record.
    _in_range("max_tokens", config.max_tokens, MIN_BLOCK_TOKENS, None,
              " (room for the block's prefix, its fences and one record)")
    _in_range("repo_window", config.repo_window, 0, MAX_LIMIT)
    _in_range("min_records_per_scope", config.min_records_per_scope, 1, MAX_SCOPE_CAP)
    _in_range("retention_days", config.retention_days, 0, MAX_RETENTION_DAYS)
    _in_range("reach_retention_days", config.reach_retention_days, 0,
              MAX_REACH_RETENTION_DAYS)
    if not config.store:
        raise ConfigError("memory.store: must name a store")
    if config.ranking not in RANKINGS:
        raise ConfigError(f"memory.ranking: must be one of {', '.join(RANKINGS)},"
                          f" got {config.ranking!r}")
    if config.fallback not in FALLBACKS:
        raise ConfigError(f"memory.fallback: must be one of {', '.join(FALLBACKS)},"
                          f" got {config.fallback!r}")
    if not 0.0 <= config.min_match <= 1.0:
        raise ConfigError(f"memory.min_match: must be from 0 to 1, got {config.min_match}")
    if not config.languages and config.ranking != "seed":
        raise ConfigError("memory.languages: name at least one language"
                          f" (available: {', '.join(available_languages())})")
    try:
        check_languages(config.languages)
    except ValueError as exc:
        raise ConfigError(f"memory.languages: {exc}") from None
    if config.organization is not None:
        problem = scope_key_problem(f"org:{config.organization}")
        if not config.organization or problem:
            raise ConfigError(f"memory.organization: {problem or 'must not be empty'}")
    if config.enabled and not config.organization:
        raise ConfigError("memory.organization: required when memory.enabled is true")
    _check_hooks(config.hooks)
    if config.model is not None and "/" not in config.model:
        raise ConfigError(
            f"memory.model: expected <provider>/<model>, got {config.model!r}"
        )
    if config.embeddings is not None and "/" not in config.embeddings:
        raise ConfigError(f"memory.embeddings: expected <embedder>/<model>,"
                          f" got {config.embeddings!r}")
    if not 0.0 <= config.embeddings_floor < 1.0:
        raise ConfigError("memory.embeddings_floor: must be from 0 to below 1,"
                          f" got {config.embeddings_floor}")
    _check_mcp(config.mcp)


def _check_mcp(mcp: McpSettings) -> None:
    # Each value ends up inside a scope key (user:mcp:<subject>, repo:<repo>, channel:<id>).
    for key, value in (("subject", mcp.subject), ("repo", mcp.repo), ("channel", mcp.channel)):
        if value is None:
            continue
        problem = scope_key_problem(f"user:mcp:{value}") if value else "must not be empty"
        if problem:
            raise ConfigError(f"memory.mcp.{key}: {problem}")
    if mcp.visibility not in VISIBILITIES:
        raise ConfigError(f"memory.mcp.visibility: must be one of {', '.join(VISIBILITIES)},"
                          f" got {mcp.visibility!r}")


def _check_hooks(hooks: HooksConfig) -> None:
    if not 0 < hooks.timeout <= MAX_HOOK_TIMEOUT:
        raise ConfigError(f"memory.hooks.timeout: must be above 0 and at most "
                          f"{MAX_HOOK_TIMEOUT:g} seconds, got {hooks.timeout:g}")
    # The least block ``max_tokens`` allows, at four characters a token.
    _in_range("hooks.max_chars", hooks.max_chars, 4 * MIN_BLOCK_TOKENS, None,
              " (room for the block's prefix, its fences and one record)")
    if hooks.visibility not in VISIBILITIES:
        raise ConfigError(f"memory.hooks.visibility: must be one of {', '.join(VISIBILITIES)},"
                          f" got {hooks.visibility!r}")
    if not hooks.platform or ":" in hooks.platform:
        raise ConfigError("memory.hooks.platform: must be a non-empty word without a colon, "
                          f"got {hooks.platform!r}")
    # Both end up in the person's scope key, user:<platform>:<subject>.
    problem = scope_key_problem(f"user:{hooks.platform}")
    if problem is not None:
        raise ConfigError(f"memory.hooks.platform: {problem}")
    if hooks.subject is not None:
        problem = scope_key_problem(f"user:{hooks.platform}:{hooks.subject}")
        if problem is not None:
            raise ConfigError(f"memory.hooks.subject: {problem}")
    if hooks.state_dir is not None and not hooks.state_dir.strip():
        raise ConfigError("memory.hooks.state_dir: must not be empty")


def load_config(source: str | os.PathLike[str] | Mapping[str, Any] | MemoryConfig | None = None
                ) -> MemoryConfig:
    """The configuration from a file path, a dict, an existing config, or (``None``) the
    default search: ``$SCOPEMEM_CONFIG``, else ``./scopemem.toml`` when it exists, else the
    defaults (memory off)."""
    if isinstance(source, MemoryConfig):
        return source
    if isinstance(source, Mapping):
        return config_from_mapping(source)
    if source is None:
        env = os.environ.get(CONFIG_ENV)
        if env:
            source = env
        elif Path(DEFAULT_CONFIG_FILE).is_file():
            source = DEFAULT_CONFIG_FILE
        else:
            return MemoryConfig()
    path = Path(source)
    return config_from_mapping(_read_toml(path), source=str(path))


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
