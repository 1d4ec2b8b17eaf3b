"""The operator's deleting commands: ``scopemem delete-scope``, ``forget-person`` and
``purge``.

Forgetting a record hides it from every read and keeps an audit row; deleting a scope is the
operator's tool (``--operator``, but for the local person's own scope) for data that must go
(a person who left, a channel deleted): every record of the scope, whatever its status, with
its token index entries, its day counters and its reaches. ``forget-person`` is the
common case of it: the person's own scope deleted, and in every other scope the thread keys
and run ids that name them (``core.provenance``: their platform id as a whole token)
scrubbed, one transaction per scope. ``purge`` runs the retention purge on every scope now
(each write runs it on its own scope). Every store that keeps records offers them (the
worker's through its routes); a store without the method is a clear error, and nothing is
changed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import click

from scopemem.cli.root import (
    CliState,
    echo_json,
    need_operator,
    operator_option,
    scope_key_param,
)
from scopemem.errors import ScopememError
from scopemem.plugins.markers import hookimpl

json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def _deleting(func: Callable[..., None]) -> Callable[..., None]:
    """A deleting command's arguments: KEY, --yes, --json and --operator."""
    for decorator in reversed((
            click.argument("scope_key", metavar="KEY", callback=scope_key_param),
            click.option("--yes", is_flag=True, help="Do not ask for confirmation."),
            json_option, operator_option, click.pass_obj)):
        func = decorator(func)
    return func


def _store(state: CliState, command: str, methods: tuple[str, ...]) -> Any:
    """The configured memory, durable, whose store has every one of ``methods``; a click
    error (nothing changed) otherwise."""
    import asyncio

    from scopemem.cli.builtin_memory_commands import _durable, _memory

    memory = _memory(state)
    if not memory.enabled:
        asyncio.run(memory.close())
        raise click.ClickException("memory is off (memory.enabled = false): there is no"
                                   f" store to {command}")
    _durable(memory)
    if not all(callable(getattr(memory.store, name, None)) for name in methods):
        asyncio.run(memory.close())
        raise click.ClickException(
            f"memory.store = {memory.config.store!r} cannot {command} (it has no"
            f" {' or '.join(methods)}); nothing was changed")
    return memory


def _run(memory: Any, command: str, action: Callable[[Any], Awaitable[Any]]) -> Any:
    """``action(store)``, the memory closed after it; a store failure is a click error."""
    import asyncio  # here: --help and hooks never load it

    async def main() -> Any:
        try:
            return await action(memory.store)
        finally:
            await memory.close()

    try:
        return asyncio.run(main())
    except ScopememError as exc:
        raise click.ClickException(f"{command} failed: {exc}") from None


def _own_or_operator(scope_key: str, operator: bool) -> None:
    from scopemem.cli.builtin_memory_commands import DEFAULT_CALLER

    if scope_key != DEFAULT_CALLER:
        need_operator(operator, f"{scope_key} is not {DEFAULT_CALLER}'s own scope")


async def _forget_person(store: Any, person_key: str) -> dict[str, Any]:
    """Scrub the person from every other scope's provenance, then delete their scope."""
    scrubbed: dict[str, int] = {}
    for scope_key in await store.export_scopes():
        if scope_key != person_key:
            changed = await store.scrub_provenance(scope_key, person_key)
            if changed:
                scrubbed[scope_key] = changed
    deleted = await store.delete_scope(person_key)
    return {"ok": True, "scopeKey": person_key, "deleted": deleted, "scrubbed": scrubbed}


@hookimpl
def scopemem_register_commands(cli: click.Group) -> None:
    @cli.command(name="delete-scope")
    @_deleting
    def delete_scope_command(state: CliState, scope_key: str, yes: bool, as_json: bool,
                             operator: bool) -> None:
        """Delete every record of the scope KEY (e.g. user:slack:U0123), whatever its
        status, with its counters. It cannot be undone: export the scope first to keep a
        copy. Its ids are never given again. Any scope but the local person's own takes
        --operator."""
        _own_or_operator(scope_key, operator)
        memory = _store(state, "delete a scope's records", ("delete_scope",))
        if not yes:
            click.confirm(f"Delete every record of {scope_key} for good?", abort=True,
                          err=True)
        deleted = _run(memory, "delete-scope", lambda store: store.delete_scope(scope_key))
        if as_json:
            echo_json({"ok": True, "scopeKey": scope_key, "deleted": deleted})
        else:
            click.echo(f"deleted {deleted} records of {scope_key}")

    @cli.command(name="forget-person")
    @_deleting
    def forget_person_command(state: CliState, scope_key: str, yes: bool, as_json: bool,
                              operator: bool) -> None:
        """Delete the person KEY's memory (e.g. user:slack:U0123): every record of their
        scope, with its counters, and in every other scope the thread keys and run ids that
        name them (their id, the key's last segment, as a whole token) scrubbed to
        'removed'. Prints what it removed. It cannot be undone; if it fails part way,
        running it again finishes the work (their scope goes last). Takes --operator, but
        for the local person themself."""
        from scopemem.core.provenance import person_id

        platform = scope_key.split(":")[1] if scope_key.count(":") >= 2 else ""
        # An empty id would scrub nothing, and the receipt would say nobody was named.
        if not scope_key.startswith("user:") or not platform or not person_id(scope_key):
            raise click.BadParameter(f"{scope_key!r} is not a person's scope key"
                                     " (user:<platform>:<id>)", param_hint="KEY")
        _own_or_operator(scope_key, operator)
        memory = _store(state, "forget a person",
                        ("delete_scope", "scrub_provenance", "export_scopes"))
        if not yes:
            click.confirm(f"Delete {scope_key}'s memory and scrub them from every scope's"
                          " provenance, for good?", abort=True, err=True)
        receipt = _run(memory, "forget-person",
                       lambda store: _forget_person(store, scope_key))
        if as_json:
            echo_json(receipt)
            return
        click.echo(f"deleted {receipt['deleted']} records of {scope_key}")
        for other, changed in receipt["scrubbed"].items():
            click.echo(f"scrubbed the provenance of {changed} records of {other}")
        if not receipt["scrubbed"]:
            click.echo("no other scope's provenance named them")

    @cli.command(name="purge")
    @json_option
    @operator_option
    @click.pass_obj
    def purge_command(state: CliState, as_json: bool, operator: bool) -> None:
        """Run the retention purge on every scope now: superseded and evicted records dead
        longer than memory.retention_days are deleted, swept ones scrubbed of their text
        (each write does so on its own scope). Through a worker, the worker's
        memory.retention_days applies. Takes --operator."""
        need_operator(operator, "purge changes every scope")
        memory = _store(state, "purge", ("purge",))
        result = _run(memory, "purge", lambda store: store.purge())
        if as_json:
            echo_json({"ok": True, "purged": result.purged, "scrubbed": result.scrubbed})
        else:
            click.echo(f"purged {result.purged} dead records; scrubbed the text of"
                       f" {result.scrubbed} swept records")
