"""The ``memory list|forget|sweep|remember`` grammar, shared by chat adapters and the CLI.

    memory list [<words>…] [--scope me|<kind>|all] [--limit N] [--repo owner/name]
    memory forget <id>
    memory sweep --scope <kind>|all [--repo owner/name] [--dry-run]
    memory remember [--scope me|<kind>] [--supersedes <id>] <text…>

A ``<kind>`` is any registered scope kind but ``user`` (the built-ins ``org``, ``repo``,
``channel``, and a plugin's, such as ``guild``); a person's own scope is ``me``. Text is a
command only when it starts with ``memory`` and a verb; ``memory`` alone or with one unknown
word is a usage error (someone addressed the command and got it wrong); longer prose that
merely starts with the word ("memory is flaky today") is not a command at all.

The scope gate (``scope_access``) is the one rule every surface applies before a command
touches a scope, following each scope's audience (``core.policy.audience_of``, the rule the
write policy narrows by): a person's own scope is theirs, and so is the channel scope of a
DM they are in (the request stamps its channel ``dm``); the channel the request comes from,
this installation's org scope and every repository or plugin-kind scope are shared (reading
is open, changing needs an admin); another person's scope, another channel's, another
organisation's, and a key of a kind nobody registered are closed to everyone, admins
included.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable

import attrs

from scopemem.core.policy import Audience, audience_of
from scopemem.core.scopes import scope_kind

DEFAULT_LIST_LIMIT = 20
MAX_LIST_LIMIT = 50

ME, ALL = "me", "all"
USER_KIND = "user"
ORG_KIND = "org"


class ListScope(enum.StrEnum):
    """The built-in scope words. Commands carry plain strings, so a plugin's kind name
    (``guild``) is a scope word like these."""

    ME = ME
    ORG = "org"
    REPO = "repo"
    CHANNEL = "channel"
    ALL = ALL


BUILTIN_KINDS = ("org", "repo", "channel", USER_KIND)

USAGE = {
    "list": "memory list [<words>…] [--scope me|<scope>|all] [--limit 1-50] "
            "[--repo owner/name]",
    "forget": "memory forget <id>",
    "sweep": "memory sweep --scope <scope>|all [--repo owner/name] [--dry-run]",
    "remember": "memory remember [--scope me|<scope>] [--supersedes <id>] <text>",
}


class CommandUsageError(ValueError):
    """A memory command that is malformed; the message says what and shows the usage."""

    def __init__(self, problem: str, verb: str | None = None) -> None:
        usage = USAGE[verb] if verb else " | ".join(USAGE.values())
        super().__init__(f"{problem}. Usage: {usage}")
        self.problem = problem
        self.verb = verb
        self.usage = usage


@attrs.frozen
class ListCommand:
    scope: str = ALL
    limit: int = DEFAULT_LIST_LIMIT
    query: str | None = None
    repo: str | None = None


@attrs.frozen
class ForgetCommand:
    record_id: str


@attrs.frozen
class SweepCommand:
    scope: str
    repo: str | None = None
    dry_run: bool = False


@attrs.frozen
class RememberCommand:
    text: str
    scope: str = ME
    supersedes: str | None = None
    repo: str | None = None


MemoryCommand = ListCommand | ForgetCommand | SweepCommand | RememberCommand


def scope_words(kinds: Iterable[str]) -> list[str]:
    """The words that name one scope in a command: ``me``, then every registered kind but
    ``user`` (a person names their own scope ``me``, and nobody else's)."""
    return [ME, *(kind for kind in kinds if kind != USER_KIND)]


def shared_scopes(kinds: Iterable[str]) -> list[str]:
    """What ``sweep --scope all`` sweeps, in order: the organisation's scope, the
    repository's, the channel's, a plugin's kinds."""
    named = [kind for kind in kinds if kind != USER_KIND]
    first = [kind for kind in (ORG_KIND, "repo", "channel") if kind in named]
    return [*first, *(kind for kind in named if kind not in first)]


def all_scopes(kinds: Iterable[str]) -> list[str]:
    """What ``all`` lists, in order: the person's own scope, the repository's, the
    channel's, a plugin's kinds, the organisation's."""
    named = [kind for kind in kinds if kind != USER_KIND]
    builtin = [kind for kind in ("repo", "channel") if kind in named]
    others = [kind for kind in named if kind not in ("repo", "channel", ORG_KIND)]
    return [ME, *builtin, *others, *([ORG_KIND] if ORG_KIND in named else [])]


def parse_limit(value: str, verb: str = "list") -> int:
    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= MAX_LIST_LIMIT:
        raise CommandUsageError(
            f"--limit takes a whole number from 1 to {MAX_LIST_LIMIT}, got {value!r}", verb)
    return int(value)


def parse_scope(value: str, verb: str, allowed: Collection[str]) -> str:
    """``value`` as one of the ``allowed`` scope words (case-insensitive), else a usage error
    naming them."""
    scope = value.lower()
    if scope not in allowed:
        raise CommandUsageError(f"--scope takes {'|'.join(allowed)}, got {value!r}", verb)
    return scope


#: The dashes phones and macOS type for "--" (em and en dash).
_DASHES = ("\u2014", "\u2013")


def _as_option(word: str, known: set[str]) -> str:
    """``word``, or the option of ``known`` it names after autocorrect's dash for "--"
    (``—scope`` is ``--scope``); a dash before any other word is text."""
    if word[:1] in _DASHES and "--" + word[1:].partition("=")[0] in known:
        return "--" + word[1:]
    return word


def _options(words: list[str], verb: str, valued: set[str], flags: set[str]
             ) -> tuple[dict[str, str], list[str]]:
    """Split ``--name value``, ``--name=value`` and ``--flag`` out of ``words``; the rest,
    in order, are arguments. Options may sit anywhere; an option's name after an em or en
    dash is that option (autocorrect's), a dash before any other word is text."""
    options: dict[str, str] = {}
    rest: list[str] = []
    index = 0
    while index < len(words):
        word = _as_option(words[index], valued | flags)
        index += 1
        if not word.startswith("--"):
            rest.append(word)
            continue
        name, has_value, value = word.partition("=")
        if name in flags and not has_value:
            options[name] = "true"
        elif name in valued:
            if not has_value:
                if index >= len(words) or words[index].startswith("--"):
                    raise CommandUsageError(f"{name} needs a value", verb)
                value = words[index]
                index += 1
            if name in options:
                raise CommandUsageError(f"{name} given twice", verb)
            options[name] = value
        else:
            raise CommandUsageError(f"unknown option {name}", verb)
    return options, rest


def parse_memory_command(text: str, kinds: Iterable[str] = BUILTIN_KINDS
                         ) -> MemoryCommand | None:
    """The command in ``text``, ``None`` when it is not a memory command, or
    ``CommandUsageError`` when it is one but malformed. ``kinds`` are the registered scope
    kinds, each a scope word."""
    words = text.split()
    if not words or words[0].lower() != "memory":
        return None
    if len(words) == 1:
        raise CommandUsageError("memory needs a verb: list, forget, sweep or remember")
    verb = words[1].lower()
    args = words[2:]
    names = scope_words(kinds)
    if verb == "list":
        return _parse_list(args, names)
    if verb == "forget":
        return _parse_forget(args)
    if verb == "sweep":
        return _parse_sweep(args, names)
    if verb == "remember":
        return _parse_remember(args, names)
    if len(words) == 2 or verb.startswith("-"):
        raise CommandUsageError(f"unknown memory verb {words[1]!r}")
    return None


def _parse_list(args: list[str], names: list[str]) -> ListCommand:
    options, rest = _options(args, "list", {"--scope", "--limit", "--repo"}, set())
    limit = parse_limit(options["--limit"]) if "--limit" in options else DEFAULT_LIST_LIMIT
    allowed = [*names, ALL]
    if "--scope" in options:
        scope = parse_scope(options["--scope"], "list", allowed)
    elif rest and rest[0].lower() in allowed:
        scope = rest.pop(0).lower()
    else:
        scope = ALL
    query = " ".join(rest) if rest else None
    return ListCommand(scope=scope, limit=limit, query=query, repo=options.get("--repo"))


def _record_id(word: str) -> str:
    """A record id as a person typed it, or copied it from a reply that shows it as code
    (`mem:org:acme:3`): one pair of backticks around it is no part of it."""
    if len(word) > 2 and word[0] == word[-1] == "`":
        return word[1:-1]
    return word


def _parse_forget(args: list[str]) -> ForgetCommand:
    if not args:
        raise CommandUsageError("memory forget needs a record id", "forget")
    if len(args) > 1 or args[0].startswith("--"):
        raise CommandUsageError("memory forget takes exactly one record id", "forget")
    return ForgetCommand(_record_id(args[0]))


def _parse_sweep(args: list[str], names: list[str]) -> SweepCommand:
    options, rest = _options(args, "sweep", {"--scope", "--repo"}, {"--dry-run"})
    if rest:
        raise CommandUsageError(f"unexpected words: {' '.join(rest)}", "sweep")
    if "--scope" not in options:
        raise CommandUsageError("memory sweep needs --scope", "sweep")
    scope = parse_scope(options["--scope"], "sweep", [*(n for n in names if n != ME), ALL])
    return SweepCommand(scope=scope, repo=options.get("--repo"),
                        dry_run="--dry-run" in options)


def _parse_remember(args: list[str], names: list[str]) -> RememberCommand:
    # Options lead; the first other word starts the text, which keeps every word after it
    # ("use --no-cache when building" is a fact, not an unknown option).
    known = {"--scope", "--supersedes", "--repo"}
    start = 0
    while start < len(args) and _as_option(args[start], known).startswith("--"):
        start += 1 if "=" in args[start] else 2
    options, rest = _options(args[:start], "remember", known, set())
    text = " ".join(args[start:])
    if rest or not text:
        raise CommandUsageError("memory remember needs the text to remember", "remember")
    scope = parse_scope(options.get("--scope", ME), "remember", names)
    supersedes = options.get("--supersedes")
    return RememberCommand(text=text, scope=scope, repo=options.get("--repo"),
                           supersedes=None if supersedes is None else _record_id(supersedes))


# --- the scope gate --------------------------------------------------------------------------


class Access(enum.Enum):
    OWN = "own"
    SHARED = "shared"
    CLOSED = "closed"


def scope_access(scope_key: str, caller: str, org_key: str | None, kinds: Collection[str],
                 origin: str | None = None, origin_is_dm: bool = False
                 ) -> tuple[Access, str | None]:
    """How ``caller`` stands to ``scope_key`` and, when it is closed, why: their own scope
    (or ``origin`` when ``origin_is_dm``: a DM is its person's conversation); a shared one
    (the channel scope ``origin`` the request comes from, this installation's org, any
    repository or registered plugin kind); or closed (another person's, another channel's,
    another organisation's, a kind nobody registered)."""
    if scope_key == caller:
        return Access.OWN, None
    kind = scope_kind(scope_key)
    if kind not in kinds:
        # The kind may be what a person typed (a record id): rendered as a record's text.
        # (Imported here: the text rules load the word engine, which ``--help`` and a hook
        # with memory off never need.)
        from scopemem.core.text import sanitize_field

        return Access.CLOSED, (f"no scope kind {sanitize_field(kind)!r} is registered here; "
                               "nobody can reach that scope")
    audience = audience_of(scope_key)
    if audience is Audience.PERSON:
        # Said for a read and for a change alike: "out of reach", never "cannot change".
        return Access.CLOSED, "that is another person's scope; nobody else can reach it"
    if audience is Audience.ORIGIN and scope_key != origin:
        return Access.CLOSED, ("that scope is another channel's; only a request from that "
                               "channel can reach it")
    if audience is Audience.ORIGIN and origin_is_dm:
        return Access.OWN, None
    if kind == ORG_KIND and org_key is None:
        return Access.CLOSED, ("no organisation is configured here (memory.organization), so "
                               "no org scope can be reached; set it to this one's name")
    if kind == ORG_KIND and scope_key != org_key:
        return Access.CLOSED, ("that is another organisation's scope; nobody here can "
                               "reach it")
    return Access.SHARED, None


def read_refusal(scope_key: str, caller: str, org_key: str | None, kinds: Collection[str],
                 origin: str | None = None, origin_is_dm: bool = False) -> str | None:
    """Why ``caller``, in the channel whose scope is ``origin`` (None: no channel), may not
    list ``scope_key`` (``None``: allowed)."""
    access, reason = scope_access(scope_key, caller, org_key, kinds, origin, origin_is_dm)
    return reason if access is Access.CLOSED else None


def change_refusal(scope_key: str, caller: str, is_admin: bool, org_key: str | None,
                   kinds: Collection[str], origin: str | None = None,
                   origin_is_dm: bool = False) -> str | None:
    """Why ``caller`` may not change records of ``scope_key`` (forget, sweep, remember;
    ``None``: allowed). A person's own scope is always theirs, as is the DM they are in; a
    shared scope needs an admin (with no admins configured, nobody is one); a closed scope
    is nobody's."""
    access, reason = scope_access(scope_key, caller, org_key, kinds, origin, origin_is_dm)
    if access is Access.CLOSED:
        return reason
    if access is Access.SHARED and not is_admin:
        # Said by every surface (chat, the command line, MCP, the hub): no surface's syntax.
        return ("only admins can change records in shared scopes (the people memory.admins "
                "names); your own scope (me) is yours to change")
    return None
