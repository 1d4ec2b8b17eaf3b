"""``scopemem embeddings backfill``: embed the records written before the semantic lane.

Every active record of every scope (or of ``--scope``) without a vector of the model
``memory.embeddings`` names is embedded and its vector kept, in batches, each kept before
the next is asked for: a run stopped half way (Ctrl-C, a failed call, a kill) is resumed by
running it again, which embeds only what is still missing. A record whose text the embedder
refuses (a text longer than its model takes) is left without a vector and the run goes on;
one line on stderr says how many and the first reason. Exit status 0 when every scope was
done (refused texts included), 1 when a failure stopped the run. A progress bar (scopes) is
drawn when stderr is a terminal, nothing otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import click

from scopemem.cli.port_stream import Progress
from scopemem.cli.root import CliState, scope_key_param
from scopemem.plugins.markers import hookimpl

if TYPE_CHECKING:
    from scopemem.api.memory import Memory

__all__ = ["scopemem_register_commands"]


@hookimpl
def scopemem_register_commands(cli: click.Group) -> None:
    @cli.group(name="embeddings")
    def embeddings() -> None:
        """The semantic lane's vectors (memory.embeddings)."""

    @embeddings.command(name="backfill")
    @click.option("--scope", "scope_key", metavar="KEY", default=None,
                  callback=scope_key_param,
                  help="One scope (a full key, e.g. repo:acme/app); default every scope.")
    @click.pass_obj
    def backfill(state: CliState, scope_key: str | None) -> None:
        """Embed every record that has no vector of the configured model yet."""
        import asyncio

        from scopemem.cli.builtin_memory_commands import _memory

        memory = _memory(state)

        async def main() -> tuple[int, tuple[int, str] | None]:
            # One event loop for the work and the close: a store's pool (PostgreSQL's)
            # belongs to the loop that opened it.
            try:
                return await _backfill(memory, scope_key)
            finally:
                await memory.close()

        kept, refused = asyncio.run(main())
        if refused:
            click.echo(f"{refused[0]} record(s) got no vector: the embedder refused their "
                       f"text (the first, {refused[1]})", err=True)
        click.echo(f"embedded {kept} record(s) with {memory.config.embeddings}")


async def _backfill(memory: Memory, scope_key: str | None
                    ) -> tuple[int, tuple[int, str] | None]:
    """Records embedded, and (records refused, the first's id and reason) if any."""
    from scopemem.errors import ScopememError
    from scopemem.stores.shared.vectors import VectorStore

    lane = memory.semantic
    if not memory.enabled or lane is None:
        raise click.ClickException("the semantic lane is off: set memory.enabled and "
                                   "memory.embeddings (<embedder>/<model>) first")
    store = memory.store
    if not isinstance(store, VectorStore):
        raise click.ClickException(f"store {memory.config.store!r} keeps no vectors")
    if scope_key is not None:
        scopes = [scope_key]
    elif hasattr(store, "export_scopes"):
        try:
            scopes = list(await cast(Any, store).export_scopes())
        except ScopememError as exc:
            raise click.ClickException(f"cannot list the scopes: {exc} (nothing embedded;"
                                       " run again)") from None
    else:
        raise click.ClickException("this store cannot list its scopes: give --scope")
    # Over the scopes; ``count``: every batch kept so far, a failed scope's earlier ones too.
    progress = Progress("scopes", len(scopes))
    refused: tuple[int, str] | None = None
    try:
        for key in scopes:
            try:
                done = await lane.embed_missing(store, key, progress=progress.advance)
            except ScopememError as exc:
                raise click.ClickException(f"{key}: {exc} ({progress.count} record(s) "
                                           "embedded; run again to resume)") from None
            if done.refused:
                refused = (done.refused + (refused[0] if refused else 0),
                           refused[1] if refused else str(done.reason))
            progress.advance(0, 1)
    finally:
        progress.close()
    return progress.count, refused
