"""``scopemem delete-scope``: every record of one scope deleted from the store, for good.

Forgetting a record hides it from every read and keeps an audit row; deleting a scope is the
operator's tool (``--operator``, but for the local person's own scope) for data that must go
(a person who left, a channel deleted): every record of the scope, whatever its status, with
its token index entries and its day counters, in one transaction. Only stores that can do
it in place offer it (``delete_scope``: the SQLite store's shared layout); any other store is
a clear error, and nothing is changed.
"""

from __future__ import annotations

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


@hookimpl
def scopemem_register_commands(cli: click.Group) -> None:
    @cli.command(name="delete-scope")
    @click.argument("scope_key", metavar="KEY", callback=scope_key_param)
    @click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
    @click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
    @operator_option
    @click.pass_obj
    def delete_scope_command(state: CliState, scope_key: str, yes: bool, as_json: bool,
                             operator: bool) -> None:
        """Delete every record of the scope KEY (e.g. user:slack:U0123), whatever its
        status, with its counters. It cannot be undone: export the scope first to keep a
        copy. Its ids are never given again. Any scope but the local person's own takes
        --operator."""
        import asyncio

        from scopemem.cli.builtin_memory_commands import DEFAULT_CALLER, _durable, _memory

        if scope_key != DEFAULT_CALLER:
            need_operator(operator, f"{scope_key} is not {DEFAULT_CALLER}'s own scope")

        memory = _memory(state)
        if not memory.enabled:
            asyncio.run(memory.close())
            raise click.ClickException("memory is off (memory.enabled = false): there is no"
                                       " store to delete from")
        _durable(memory)
        store: Any = memory.store
        if not callable(getattr(store, "delete_scope", None)):
            asyncio.run(memory.close())
            raise click.ClickException(
                f"memory.store = {memory.config.store!r} cannot delete a scope's records in"
                " place (the sqlite store's shared layout can); nothing was changed")
        if not yes:
            click.confirm(f"Delete every record of {scope_key} for good?", abort=True,
                          err=True)

        async def main() -> int:
            try:
                deleted: int = await store.delete_scope(scope_key)
                return deleted
            finally:
                await memory.close()

        try:
            deleted = asyncio.run(main())
        except ScopememError as exc:
            raise click.ClickException(f"delete-scope failed: {exc}") from None
        if as_json:
            echo_json({"ok": True, "scopeKey": scope_key, "deleted": deleted})
        else:
            click.echo(f"deleted {deleted} records of {scope_key}")
