"""The ``memory list|forget|sweep`` grammar, shared by chat adapters and the command line.

    memory list [<words>…] [--scope me|org|repo|channel|all] [--limit N] [--repo owner/name]
    memory forget <id>
    memory sweep --scope org|repo|channel|all [--repo owner/name] [--dry-run]

Text is a command only when it starts with ``memory`` and a verb; ``memory`` alone or with one
unknown word is a usage error (someone addressed the command and got it wrong); longer prose
that merely starts with the word ("memory is flaky today") is not a command at all.
"""

from __future__ import annotations

import enum

import attrs

DEFAULT_LIST_LIMIT = 20
MAX_LIST_LIMIT = 50


class ListScope(enum.StrEnum):
    ME = "me"
    ORG = "org"
    REPO = "repo"
    CHANNEL = "channel"
    ALL = "all"


SWEEP_SCOPES = (ListScope.ORG, ListScope.REPO, ListScope.CHANNEL, ListScope.ALL)

USAGE = {
    "list": "memory list [<words>…] [--scope me|org|repo|channel|all] [--limit 1-50] "
            "[--repo owner/name]",
    "forget": "memory forget <id>",
    "sweep": "memory sweep --scope org|repo|channel|all [--repo owner/name] [--dry-run]",
}


class CommandUsageError(ValueError):
    """A memory command that is malformed; the message says what and shows the usage."""

    def __init__(self, problem: str, verb: str | None = None) -> None:
        usage = USAGE[verb] if verb else " | ".join(USAGE.values())
        super().__init__(f"{problem}. Usage: {usage}")
        self.problem = problem
        self.verb = verb


@attrs.frozen
class ListCommand:
    scope: ListScope = ListScope.ALL
    limit: int = DEFAULT_LIST_LIMIT
    query: str | None = None
    repo: str | None = None


@attrs.frozen
class ForgetCommand:
    record_id: str


@attrs.frozen
class SweepCommand:
    scope: ListScope
    repo: str | None = None
    dry_run: bool = False


MemoryCommand = ListCommand | ForgetCommand | SweepCommand


def parse_limit(value: str, verb: str = "list") -> int:
    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= MAX_LIST_LIMIT:
        raise CommandUsageError(
            f"--limit takes a whole number from 1 to {MAX_LIST_LIMIT}, got {value!r}", verb)
    return int(value)


def parse_list_scope(value: str, verb: str, allowed: tuple[ListScope, ...]) -> ListScope:
    try:
        scope = ListScope(value.lower())
    except ValueError:
        scope = None
    if scope not in allowed:
        names = "|".join(s.value for s in allowed)
        raise CommandUsageError(f"--scope takes {names}, got {value!r}", verb)
    return scope


def _options(words: list[str], verb: str, valued: set[str], flags: set[str]
             ) -> tuple[dict[str, str], list[str]]:
    """Split ``--name value``, ``--name=value`` and ``--flag`` out of ``words``; the rest,
    in order, are arguments. Options may sit anywhere."""
    options: dict[str, str] = {}
    rest: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
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


def parse_memory_command(text: str) -> MemoryCommand | None:
    """The command in ``text``, ``None`` when it is not a memory command, or
    ``CommandUsageError`` when it is one but malformed."""
    words = text.split()
    if not words or words[0].lower() != "memory":
        return None
    if len(words) == 1:
        raise CommandUsageError("memory needs a verb: list, forget or sweep")
    verb = words[1].lower()
    args = words[2:]
    if verb == "list":
        return _parse_list(args)
    if verb == "forget":
        return _parse_forget(args)
    if verb == "sweep":
        return _parse_sweep(args)
    if len(words) == 2 or verb.startswith("-"):
        raise CommandUsageError(f"unknown memory verb {words[1]!r}")
    return None


def _parse_list(args: list[str]) -> ListCommand:
    options, rest = _options(args, "list", {"--scope", "--limit", "--repo"}, set())
    limit = parse_limit(options["--limit"]) if "--limit" in options else DEFAULT_LIST_LIMIT
    if "--scope" in options:
        scope = parse_list_scope(options["--scope"], "list", tuple(ListScope))
    elif rest and rest[0].lower() in set(ListScope):
        scope = ListScope(rest.pop(0).lower())
    else:
        scope = ListScope.ALL
    query = " ".join(rest) if rest else None
    return ListCommand(scope=scope, limit=limit, query=query, repo=options.get("--repo"))


def _parse_forget(args: list[str]) -> ForgetCommand:
    if not args:
        raise CommandUsageError("memory forget needs a record id", "forget")
    if len(args) > 1 or args[0].startswith("--"):
        raise CommandUsageError("memory forget takes exactly one record id", "forget")
    return ForgetCommand(args[0])


def _parse_sweep(args: list[str]) -> SweepCommand:
    options, rest = _options(args, "sweep", {"--scope", "--repo"}, {"--dry-run"})
    if rest:
        raise CommandUsageError(f"unexpected words: {' '.join(rest)}", "sweep")
    if "--scope" not in options:
        raise CommandUsageError("memory sweep needs --scope", "sweep")
    scope = parse_list_scope(options["--scope"], "sweep", SWEEP_SCOPES)
    return SweepCommand(scope=scope, repo=options.get("--repo"),
                        dry_run="--dry-run" in options)


# --- the scope gate --------------------------------------------------------------------------


def forget_refusal(scope_key: str, caller: str, is_admin: bool) -> str | None:
    """Why ``caller`` may not change records of ``scope_key`` (``None``: allowed).

    A person's own scope is always theirs. Another person's scope is nobody else's, admins
    included: no request can ever name it. Every shared scope (org, repo, channel, or a
    plugin's kind) needs an admin; with no admins configured, nobody is one."""
    if scope_key == caller:
        return None
    if scope_key.startswith("user:"):
        return "that record belongs to another person's scope; nobody else can change it"
    if not is_admin:
        return ("only admins can change records in shared scopes; "
                "`memory list me` shows your own records")
    return None
