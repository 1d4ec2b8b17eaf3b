"""``scopemem export`` and ``scopemem import``: records moved between stores as JSON Lines.

An export file holds one record a line, in the wire's form (``core.porting.record_line``,
the one cattrs converter): every field and every status, ids included. How a file is streamed
(a page or two batches in memory at a time, a progress bar on stderr when it is a terminal,
the import's error policy) is ``cli.port_stream``; this module is the commands: options,
who may export what, and what each says when it is done.

Without ``--operator`` an export keeps to the scopes the local person may read (the API's read
gate): ``--all`` and another person's or a channel's scope take it. An import writes the
scopes its file names, as the operator.

What an import trusts: a line is checked against the caps every boundary shares, and
against this machine's clock (a ``createdAt`` or ``lastUsedAt`` more than five minutes ahead
is a bad line, as is a ``useCount`` above a billion). Each record then passes the screen every
write passes (``stores.porting.screen_import``): secrets redacted, fields fitted, an active
fact the status gate refuses imported as ``swept``; the summary counts each. A record's
``source`` is kept only with ``--trust-source``, the operator vouching for the file (their
own export); otherwise every record is imported as reflection-sourced, since only a person's
own ``remember`` makes a ``human`` record.
"""

from __future__ import annotations

import os
from typing import IO, TYPE_CHECKING

import click

from scopemem.cli.port_stream import Tally, export_stream, import_stream, output
from scopemem.cli.root import (
    CliState,
    echo_json,
    need_operator,
    operator_option,
    scope_key_param,
)
from scopemem.errors import ScopememError, StoreError
from scopemem.plugins.markers import hookimpl

if TYPE_CHECKING:
    from scopemem.api.memory import Memory
    from scopemem.stores.porting import PortableStore


def _store(state: CliState, *, changes: bool) -> tuple[Memory, PortableStore]:
    """The configured memory and its store as a ``PortableStore``, or a click error."""
    import asyncio

    from scopemem.cli.builtin_memory_commands import _durable, _memory
    from scopemem.stores.porting import portable

    memory = _memory(state)
    if not memory.enabled:
        asyncio.run(memory.close())
        raise click.ClickException("memory is off (memory.enabled = false): there is no"
                                   " store to move records " + ("into" if changes else "from"))
    if changes:
        _durable(memory)
    try:
        return memory, portable(memory.store, memory.config.store)
    except StoreError as exc:
        asyncio.run(memory.close())
        raise click.ClickException(str(exc)) from None


def _readable(memory: Memory, scope_key: str) -> None:
    """A usage error naming ``--operator`` when the local person may not read ``scope_key``
    (the API's read gate, ``Memory.read_refusal``)."""
    from scopemem.api.results import Caller
    from scopemem.cli.builtin_memory_commands import DEFAULT_CALLER

    refusal = memory.read_refusal(scope_key, Caller(user_key=DEFAULT_CALLER))
    if refusal is not None:
        import asyncio

        asyncio.run(memory.close())
        need_operator(False, f"{DEFAULT_CALLER} may not read {scope_key} ({refusal})")


@hookimpl
def scopemem_register_commands(cli: click.Group) -> None:
    @cli.command(name="export")
    @click.option("--scope", "scope_key", metavar="KEY", callback=scope_key_param,
                  help="The scope key to export (e.g. org:acme, user:slack:U0123).")
    @click.option("--all", "every", is_flag=True, help="Export every scope the store holds.")
    @click.option("--out", type=click.Path(dir_okay=False, allow_dash=True),
                  help="Write here (default: stdout). Written in full or not at all.")
    @operator_option
    @click.pass_obj
    def export_command(state: CliState, scope_key: str | None, every: bool,
                       out: str | None, operator: bool) -> None:
        """Write records as JSON Lines, one record a line, every field and status kept.

        Scopes come sorted by key, records in id order within a scope. A scope the local
        person may not read (another person's, a channel's), and --all, take --operator."""
        import asyncio

        if (scope_key is None) == (not every):
            raise click.UsageError("give either --scope KEY or --all")
        if every:
            need_operator(operator, "--all exports every person's and every channel's scope")
        memory, store = _store(state, changes=False)
        if scope_key is not None and not operator:
            _readable(memory, scope_key)

        async def main() -> int:
            try:
                with output(out) as stream:
                    return await export_stream(store, scope_key, stream)
            finally:
                await memory.close()

        try:
            count = asyncio.run(main())
        except ScopememError as exc:
            raise click.ClickException(f"export failed: {exc}") from None
        click.echo(f"exported {count} records", err=True)

    @cli.command(name="import")
    @click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
    @click.option("--dry-run", is_flag=True, help="Check every line; write nothing.")
    @click.option("--trust-source", is_flag=True,
                  help="Keep each record's source (human or reflection) as the file says: "
                       "for an operator's own export. Without it every record is imported "
                       "as reflection-sourced.")
    @click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
    @click.pass_obj
    def import_command(state: CliState, file: str, dry_run: bool, trust_source: bool,
                       as_json: bool) -> None:
        """Add the records of a JSON Lines export (FILE, or - for stdin) to the store.

        Ids, statuses, times and counts are kept; a record whose id is already in its scope
        is skipped, so importing a file twice adds nothing. Every record passes the screen
        every write passes: secrets are redacted, and an active fact the status gate
        refuses is imported as swept. A time in the future (beyond five minutes) or more
        than a billion uses is a bad line. At the first bad line the import stops: earlier
        batches stay written, nothing of the bad line's batch is."""
        import asyncio

        name = "stdin" if file == "-" else file
        try:
            stream: IO[bytes] = click.open_file(file, "rb")
        except OSError as exc:
            raise click.ClickException(f"cannot read {file}: {exc.strerror or exc}") from None
        size = None if file == "-" else os.stat(file).st_size
        memory, store = _store(state, changes=not dry_run)
        if trust_source and not getattr(store, "keeps_import_source", True):
            asyncio.run(memory.close())
            stream.close()
            raise click.UsageError(
                "--trust-source: this store (the Memory Worker) imports every record as"
                " reflection-sourced, whoever sends it; to keep sources, import into the"
                " store the worker serves (its sqlite or postgres configuration)")

        async def main() -> tuple[Tally, int]:
            try:
                return await import_stream(store, stream, name, size, dry_run, trust_source)
            finally:
                await memory.close()

        try:
            tally, added = asyncio.run(main())
        except ScopememError as exc:
            raise click.ClickException(f"import failed: {exc}") from None
        finally:
            stream.close()  # stdin stays open (click.open_file)
        read, screened = tally.read, tally.summary()
        if as_json:
            echo_json({"ok": True, "read": read, "imported": added, "dryRun": dry_run,
                       "redacted": tally.redacted, "swept": tally.swept,
                       "dropped": 0,  # the screen drops none (kept for the output's readers)
                       "sourceReset": tally.source_reset})
            return
        if screened:
            click.echo(f"screened: {screened}")
        if dry_run:
            click.echo(f"{read} valid records in {name}; nothing written (dry run)")
        else:
            click.echo(f"imported {added} of {read} records"
                       f" ({read - added} already present)")
