"""``scopemem health``: whether the configured store can serve, and what needs a person.

One line per check (``ok``, ``warn`` or ``fail``; ``--json``: a list of objects): the
worker's readiness check against the configured store, whether it is the in-process
fallback, the SQLite data directory's free space, scopes near the cap, failed reflections
(``stores.health``). Exits 0 when all is ok, 1 when a check warns, 2 when one fails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from scopemem.cli import CliState, echo_json
from scopemem.plugins.markers import hookimpl

if TYPE_CHECKING:
    from scopemem.stores.health import Check


async def _checks(state: CliState) -> list[Check] | None:
    from scopemem.installation import build_store
    from scopemem.stores.health import check_store

    config = state.config()
    if not config.enabled:
        return None
    # What a bot would get: the fallback is allowed, so it can be reported.
    store = build_store(config, state.pm, allow_fallback=True)
    try:
        checks = await check_store(store, configured=config.store,
                                   cap=config.max_records_per_scope)
    finally:
        await store.close()
    return checks


@hookimpl
def scopemem_register_commands(cli: click.Group) -> None:
    @cli.command(name="health")
    @click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
    @click.pass_obj
    def health(state: CliState, as_json: bool) -> None:
        """Check the configured store: readiness, durability, disk, scopes near the cap,
        failed reflections. Exits 1 when a check warns, 2 when one fails."""
        import asyncio

        import attrs

        from scopemem.errors import ScopememError
        from scopemem.stores.health import WARN, Check, exit_status

        try:
            checks = asyncio.run(_checks(state))
        except ScopememError as exc:
            raise click.ClickException(str(exc)) from None
        if checks is None:
            # A worker serves its store whatever memory.enabled says: a configuration
            # without it checks nothing here, which must not pass for healthy.
            checks = [Check("memory", WARN, "memory is off (memory.enabled = false): no store "
                                            "was checked; set memory.enabled = true to check "
                                            "the store (a worker's configuration too)")]
        if as_json:
            echo_json([attrs.asdict(check) for check in checks])
        else:
            for check in checks:
                click.echo(f"{check.status:<4} {check.name}: {check.detail}")
        raise SystemExit(exit_status(checks))
