"""The ``[memory]`` table: what each key means (``MemoryConfig`` and its sub-tables, with
their defaults) and the rules a value must keep beyond its type (``check_config``, each
mistake a ``ConfigError`` naming its key). Reading a file or a dict into it is
``scopemem.config``, which every caller imports these from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from scopemem.core.browse import DEFAULT_REACH_RETENTION_DAYS, MAX_REACH_RETENTION_DAYS
from scopemem.core.fusion import SEMANTIC_SHARE
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
    from scopemem.core.ranking import Ranking

__all__ = ["HooksConfig", "McpSettings", "MemoryConfig", "TracingConfig", "check_config"]

# The least cap a worker client may ask for (``memory.min_records_per_scope``).
DEFAULT_CAP_FLOOR = 100
RANKINGS = ("weighted", "seed")
FALLBACKS = ("in-process", "refuse")
#: The origins a surface may stamp its runs with (``core.policy.Visibility``'s values).
VISIBILITIES = ("public", "private", "dm", "machine")
#: Claude Code's own default hook timeout is 60 s; a hook allowed longer would be killed.
MAX_HOOK_TIMEOUT = 60.0
#: Claude Code shows the model about 10,000 characters of a hook's additional context (the
#: rest only as a short preview); a hook's block stays under that by default.
DEFAULT_HOOK_CHARS = 9000
#: The longest ``memory.embeddings_wait_seconds`` (as long as an embedder's own timeout) and
#: ``memory.repo_wait_seconds``.
MAX_WAIT_SECONDS = 300.0


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
    # (a model's own scale: 0.3 chosen for all-MiniLM-L6-v2, higher for e5's), and the
    # cosine's share of the blended match (0.4 chosen for all-MiniLM-L6-v2, 0.5 for
    # all-mpnet-base-v2).
    embeddings: str | None = None
    embeddings_floor: float = 0.3
    embeddings_share: float = SEMANTIC_SHARE
    # The most a read waits for the brief's vector: past it the block is the keyword block
    # (one warning a scope), so a slow embedder never holds a model turn for its whole
    # ``timeout_seconds``, which bounds the writes' embedding too.
    embeddings_wait_seconds: float = 2.0
    # The most a read waits for ``Request.repo`` to settle (an awaitable: a git or API
    # lookup): past it the block is read without the repository scope (one warning), so a
    # lookup that hangs never holds a model turn. Reflection still waits for the answer.
    repo_wait_seconds: float = 5.0
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
        """The ``Ranking`` these settings name (``check_config`` has validated them)."""
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


def _in_range(key: str, value: int, low: int, high: int | None, why: str = "") -> None:
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise ConfigError(f"memory.{key}: must be {bound}{why}, got {value}")


def check_config(config: MemoryConfig) -> None:
    """Every range and rule of the table's values, beyond their types (``ConfigError``
    naming the key)."""
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
    for admin in config.admins:
        # An admin is a caller, and a caller is a user scope key: anything else names nobody
        # (``user:slack:``, empty after its namespace, is refused as a caller).
        if not admin.startswith("user:") or admin.endswith(":") or scope_key_problem(admin):
            raise ConfigError(f"memory.admins: {admin!r} is not a user scope key"
                              " (user:<platform>:<id>, e.g. user:slack:U0001)")
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
    if not 0.0 <= config.embeddings_share <= 1.0:  # nan fails too
        raise ConfigError("memory.embeddings_share: must be from 0 to 1,"
                          f" got {config.embeddings_share}")
    for name in ("embeddings_wait_seconds", "repo_wait_seconds"):
        wait = getattr(config, name)
        if not 0.0 < wait <= MAX_WAIT_SECONDS:  # nan fails too
            raise ConfigError(f"memory.{name}: must be above 0 and at most"
                              f" {MAX_WAIT_SECONDS}, got {wait}")
    _check_mcp(config.mcp)


def _subject_problem(subject: str, platform: str) -> str | None:
    """What is wrong with a configured person's name (``memory.hooks.subject``,
    ``memory.mcp.subject``), whose scope is ``user:<platform>:<subject>``. An empty one, or
    one ending in a colon, is an id no scope is made of; the scope's key given for the name
    makes a scope nothing else reads."""
    if not subject:
        return "must not be empty"
    if subject.endswith(":"):
        return "must not end with a colon"
    if subject.startswith("user:"):
        name = subject.rsplit(":", 1)[-1]
        return f'takes the name, not the user scope\'s key: subject = "{name}"'
    return scope_key_problem(f"user:{platform}:{subject}")


def _check_mcp(mcp: McpSettings) -> None:
    # Each value ends up inside a scope key (user:mcp:<subject>, repo:<repo>, channel:<id>).
    for key, value in (("subject", mcp.subject), ("repo", mcp.repo), ("channel", mcp.channel)):
        if value is None:
            continue
        problem = (_subject_problem(value, "mcp") if key == "subject"
                   else scope_key_problem(f"user:mcp:{value}") if value else "must not be empty")
        if problem:
            raise ConfigError(f"memory.mcp.{key}: {problem}")
    if mcp.channel is not None:
        # A platform id, as a chat run's (``slack:C0456``): the scope key given for it, or
        # an id empty after its namespace, is a scope no run reads.
        if mcp.channel.startswith("channel:"):
            raise ConfigError("memory.mcp.channel: takes the platform id, not the channel "
                              f'scope\'s key: channel = "{mcp.channel[len("channel:"):]}"')
        if mcp.channel.endswith(":"):
            raise ConfigError(f"memory.mcp.channel: {mcp.channel!r} is empty after its "
                              "namespace")
    if mcp.repo is not None:
        from scopemem.gitremote import typed_repo

        # The scope a clone's remote names (``repo:acme/api``), the one the team's other
        # runs read: a URL or a bare name would keep the server's facts apart from theirs.
        ok, named = typed_repo(mcp.repo)
        if not ok:
            hint = f': repo = "{named}"' if named else " (e.g. acme/api)"
            raise ConfigError("memory.mcp.repo: takes owner/name as a clone's remote names"
                              f" it{hint}")
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
    if hooks.platform == "user":  # user:alice reads as a scope key: no user scope is made
        raise ConfigError("memory.hooks.platform: must not be 'user', the scope's kind")
    # Both end up in the person's scope key, user:<platform>:<subject>.
    problem = scope_key_problem(f"user:{hooks.platform}")
    if problem is not None:
        raise ConfigError(f"memory.hooks.platform: {problem}")
    if hooks.subject is not None:
        problem = _subject_problem(hooks.subject, hooks.platform)
        if problem is not None:
            raise ConfigError(f"memory.hooks.subject: {problem}")
    if hooks.state_dir is not None and not hooks.state_dir.strip():
        raise ConfigError("memory.hooks.state_dir: must not be empty")
