"""``scopemem export`` and ``scopemem import``: records moved between stores as JSON Lines.

An export file holds one record a line, in the wire's form (``core.porting.record_line``,
the one cattrs converter): every field and every status, ids included. Both commands stream:
the export holds one page of records at a time (``stores.porting.export_records``), the
import at most two batches of ``IMPORT_BATCH`` records (one being written while the next is
read and checked), whatever the file's size. A progress bar shows
on stderr when it is a terminal, never in a pipe or a log.

Without ``--operator`` an export keeps to the scopes the local person may read (the API's read
gate): ``--all`` and another person's or a channel's scope take it. An import writes the
scopes its file names, as the operator.

The import's error policy: lines are read, checked and written in batches, in file order. At
the first line that is not a valid record the import stops with an error naming the line
and the problem; the batches before it are written (and say so), nothing from the batch
holding the bad line is. Importing the corrected file again is safe: records already present
are skipped. ``--dry-run`` checks every line and writes nothing, for a check before the real
run. Blank lines are skipped.

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

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

import attrs
import click

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
    import asyncio

    from scopemem.api.memory import Memory
    from scopemem.core.records import Record
    from scopemem.stores.porting import PortableStore

# Records per ``import_records`` call: what an import holds in memory at once.
IMPORT_BATCH = 500
# The longest line an import reads: a record at every cap, each character escaped, fits.
MAX_LINE_BYTES = 1024 * 1024
# A record count on stderr every this many records, when no bar can be drawn.
_TICK = 1000


class _BadLine(click.ClickException):
    """A line of an import file that is not a valid record."""


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


def _stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


class _Progress:
    """A bar on stderr when it is a terminal (over ``length`` units when known, else a
    count of records); nothing otherwise."""

    def __init__(self, label: str, length: int | None) -> None:
        self.shown = _stderr_is_terminal()
        self.label = label
        self.count = 0
        self.bar: Any = None
        if self.shown and length:
            # Drawn at most about a thousand times, however many lines or bytes.
            self.bar = click.progressbar(length=length, label=label, file=sys.stderr,
                                         update_min_steps=max(1, length // 1000))
            self.bar.__enter__()

    def advance(self, records: int = 1, units: int = 0) -> None:
        self.count += records
        if self.bar is not None:
            self.bar.update(units)
        elif self.shown and self.count % _TICK < records:
            click.echo(f"\r{self.label}: {self.count} records", err=True, nl=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
        elif self.shown and self.count >= _TICK:
            click.echo("", err=True)


@contextlib.contextmanager
def _output(path: str | None) -> Iterator[IO[bytes]]:
    """Where an export goes: stdout, or ``path`` written beside it and renamed into place
    only when the export is complete (a failed export never leaves half a file)."""
    if path is None or path == "-":
        with click.open_file("-", "wb") as stream:
            yield stream
            stream.flush()
        return
    partial = f"{path}.partial"
    try:
        handle = open(partial, "wb")  # noqa: SIM115 - closed below, renamed on success
    except OSError as exc:
        raise click.ClickException(f"cannot write {partial}: {exc.strerror or exc}") from None
    try:
        with handle:
            yield handle
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def _lines(stream: IO[bytes]) -> Iterator[tuple[int, bytes | None]]:
    """``(line number, line)`` of an import stream, one line in memory at a time; the line
    is None when it is longer than ``MAX_LINE_BYTES``."""
    number = 0
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            yield number, None
            return
        yield number, raw


async def _export(store: PortableStore, scope_key: str | None, out: IO[bytes]) -> int:
    from scopemem.core.porting import record_line
    from scopemem.stores.porting import export_records

    scopes = None if scope_key is not None else await store.export_scopes()
    progress = _Progress("exporting", None if scopes is None else len(scopes))
    count = 0
    try:
        for key in [scope_key] if scopes is None else scopes:
            async for record in export_records(store, key):
                out.write(record_line(record).encode("utf-8") + b"\n")
                count += 1
                progress.advance()
            progress.advance(0, units=1)
    finally:
        progress.close()
    return count


def _parse(raw: bytes | None, now: int) -> Record | str | None:
    """The record of one line (its times checked against ``now``), None for a blank line,
    or what is wrong with it."""
    from scopemem.core.porting import parse_record_line
    from scopemem.core.records import WireError

    if raw is None:
        return f"longer than {MAX_LINE_BYTES} bytes"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text"
    if not text.strip():
        return None
    try:
        return parse_record_line(text, now)
    except WireError as exc:
        return str(exc)


class _Writer:
    """Writes batches in file order, one in flight while the next one is read (at most two
    batches in memory); ``written_through`` is the last line of the last batch written."""

    def __init__(self, store: PortableStore) -> None:
        self.store = store
        self.task: asyncio.Future[int] | None = None
        self.pending_through = 0
        self.written_through = 0
        self.added = 0

    async def settle(self) -> None:
        task, self.task = self.task, None
        if task is not None:
            self.added += await task
            self.written_through = self.pending_through

    async def submit(self, batch: list[Record], through: int) -> None:
        import asyncio

        await self.settle()
        self.task = asyncio.ensure_future(self.store.import_records(batch))
        self.pending_through = through


@attrs.define
class _Tally:
    """What an import read, and what the screen did to it (``ImportScreen``'s counts)."""

    read: int = 0
    redacted: int = 0
    swept: int = 0
    dropped: int = 0
    source_reset: int = 0

    def screen(self, batch: list[Record], now: int) -> list[Record]:
        """``batch`` as the store will keep it (``screen_import``), counted."""
        from scopemem.stores.porting import screen_import

        screened = screen_import(batch, now)
        self.redacted += screened.redacted
        self.swept += screened.swept
        self.dropped += screened.dropped
        return list(screened.records)

    def summary(self) -> str:
        """The screen's counts in words; empty when it changed nothing."""
        reset = "source" if self.source_reset == 1 else "sources"
        parts = [f"{count} {words}" for count, words in (
            (self.redacted, "redacted"), (self.swept, "swept by the status gate"),
            (self.dropped, "dropped by the write screen"),
            (self.source_reset, f"{reset} reset to reflection (no --trust-source)"))
            if count]
        return ", ".join(parts)


async def _import(store: PortableStore, stream: IO[bytes], name: str, size: int | None,
                  dry_run: bool, trust_source: bool) -> tuple[_Tally, int]:
    """Read, check, screen and write ``stream``; what was read, and how many were added."""
    from scopemem.core.porting import reflection_sourced
    from scopemem.stores.base import wall_clock_ms

    now = wall_clock_ms()
    tally = _Tally()
    progress = _Progress("importing", size)
    writer = _Writer(store)
    batch: list[Record] = []
    try:
        for number, raw in _lines(stream):
            parsed = _parse(raw, now)
            progress.advance(0 if parsed is None else 1, units=len(raw or b""))
            if parsed is None:
                continue
            if isinstance(parsed, str):
                await writer.settle()
                through = writer.written_through
                done = (f"the records of lines 1-{through} were written, nothing from line"
                        f" {through + 1} on (importing the corrected file again skips what"
                        " is written)" if through else "nothing was written")
                raise _BadLine(f"{name} line {number}: {parsed}; {done}")
            if not trust_source:
                sourced = reflection_sourced(parsed)
                tally.source_reset += sourced is not parsed
                parsed = sourced
            batch.append(parsed)
            tally.read += 1
            if len(batch) >= IMPORT_BATCH:
                batch = tally.screen(batch, now)
                if not dry_run:
                    await writer.submit(batch, number)
                batch = []
        batch = tally.screen(batch, now)
        if batch and not dry_run:
            await writer.submit(batch, 0)
        await writer.settle()
    finally:
        if writer.task is not None:  # an error on the way: the batch in flight ends first
            with contextlib.suppress(Exception):
                await writer.settle()
        progress.close()
    return tally, writer.added


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
                with _output(out) as stream:
                    return await _export(store, scope_key, stream)
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

        async def main() -> tuple[_Tally, int]:
            try:
                return await _import(store, stream, name, size, dry_run, trust_source)
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
                       "dropped": tally.dropped, "sourceReset": tally.source_reset})
            return
        if screened:
            click.echo(f"screened: {screened}")
        if dry_run:
            click.echo(f"{read} valid records in {name}; nothing written (dry run)")
        else:
            click.echo(f"imported {added} of {read} records"
                       f" ({read - tally.dropped - added} already present)")
