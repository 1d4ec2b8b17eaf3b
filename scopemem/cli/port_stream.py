"""Streaming records through a JSON Lines file, for ``scopemem export`` and ``import``
(``cli.builtin_port_commands``): whatever the file's size, the export holds one page of
records at a time (``stores.porting.export_records``), the import at most two batches of
``IMPORT_BATCH`` records (one being written while the next is read and checked). A progress
bar shows on stderr when it is a terminal, never in a pipe or a log.

The import's error policy: lines are read, checked and written in batches, in file order. At
the first line that is not a valid record the import stops with an error naming the line
and the problem; the batches before it are written (and say so), nothing from the batch
holding the bad line is. Importing the corrected file again is safe: records already present
are skipped. ``--dry-run`` checks every line and writes nothing, for a check before the real
run. Blank lines are skipped.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

import attrs
import click

from scopemem.errors import ScopememError, StoreError

if TYPE_CHECKING:
    import asyncio

    from scopemem.core.records import Record
    from scopemem.stores.porting import PortableStore

__all__ = ["IMPORT_BATCH", "MAX_LINE_BYTES", "Progress", "Tally", "export_stream", "import_stream",
           "output"]

# Records per ``import_records`` call: what an import holds in memory at once.
IMPORT_BATCH = 500
# The longest line an import reads: a record at every cap, each character escaped, fits.
MAX_LINE_BYTES = 1024 * 1024
# A record count on stderr every this many records, when no bar can be drawn.
_TICK = 1000


class _BadLine(click.ClickException):
    """A line of an import file that is not a valid record."""


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


class Progress:
    """A bar on stderr when it is a terminal (over ``length`` units when known, else a
    count of records); nothing otherwise. Export, import and ``embeddings backfill``'s."""

    def __init__(self, label: str, length: int | None) -> None:
        self.shown = stderr_is_terminal()
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
def output(path: str | None) -> Iterator[IO[bytes]]:
    """Where an export goes: stdout, or ``path`` written beside it and renamed into place
    only when the export is complete (a failed export never leaves half a file)."""
    if path is None or path == "-":
        try:
            with click.open_file("-", "wb") as stream:
                yield stream
                stream.flush()
        except BrokenPipeError:
            raise  # a reader that left (``| head``): not the export's to report
        except OSError as exc:  # a full disk, a quota: one line, not a traceback
            raise click.ClickException(
                f"cannot write the export to stdout: {exc.strerror or exc}") from None
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
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        if isinstance(exc, OSError):  # a full disk, a quota: one line, not a traceback
            raise click.ClickException(
                f"cannot write {path}: {exc.strerror or exc}; nothing was written to it"
            ) from None
        raise


_BOM = b"\xef\xbb\xbf"


def _lines(stream: IO[bytes]) -> Iterator[tuple[int, bytes | None]]:
    """``(line number, line)`` of an import stream, one line in memory at a time; the line
    is None when it is longer than ``MAX_LINE_BYTES``."""
    number = 0
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        if number == 1 and raw.startswith(_BOM):  # a Windows editor's byte order mark
            raw = raw[len(_BOM):]
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            yield number, None
            return
        yield number, raw


async def export_stream(store: PortableStore, scope_key: str | None, out: IO[bytes]) -> int:
    from scopemem.core.porting import record_line
    from scopemem.stores.porting import export_records

    scopes = None if scope_key is not None else await store.export_scopes()
    progress = Progress("exporting", None if scopes is None else len(scopes))
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
class Tally:
    """What an import read, and what the screen did to it (``ImportScreen``'s counts)."""

    read: int = 0
    redacted: int = 0
    swept: int = 0
    source_reset: int = 0

    def screen(self, batch: list[Record], now: int) -> list[Record]:
        """``batch`` as the store will keep it (``screen_import``), counted."""
        from scopemem.stores.porting import screen_import

        screened = screen_import(batch, now)
        self.redacted += screened.redacted
        self.swept += screened.swept
        return list(screened.records)

    def summary(self) -> str:
        """The screen's counts in words; empty when it changed nothing."""
        reset = "source" if self.source_reset == 1 else "sources"
        parts = [f"{count} {words}" for count, words in (
            (self.redacted, "redacted"), (self.swept, "swept by the status gate"),
            (self.source_reset, f"{reset} reset to reflection (no --trust-source)"))
            if count]
        return ", ".join(parts)


async def import_stream(store: PortableStore, stream: IO[bytes], name: str, size: int | None,
                  dry_run: bool, trust_source: bool) -> tuple[Tally, int]:
    """Read, check, screen and write ``stream``; what was read, and how many were added."""
    from scopemem.core.porting import reflection_sourced
    from scopemem.stores.base import wall_clock_ms

    now = wall_clock_ms()
    tally = Tally()
    progress = Progress("importing", size)
    writer = _Writer(store)
    batch: list[Record] = []
    number = 0
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
            await writer.submit(batch, number)
        await writer.settle()
    except ScopememError as exc:  # the store refused or failed a batch, maybe partway
        added = writer.added + (exc.imported if isinstance(exc, StoreError) else 0)
        through = writer.written_through
        whole = f" (the records of lines 1-{through} whole)" if through else ""
        raise click.ClickException(
            f"import failed: {exc}; {added} record{' was' if added == 1 else 's were'}"
            f" written{whole}; importing the file again skips them") from None
    finally:
        if writer.task is not None:  # an error on the way: the batch in flight ends first
            with contextlib.suppress(Exception):
                await writer.settle()
        progress.close()
    return tally, writer.added
