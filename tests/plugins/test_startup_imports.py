"""A command pays only for what it uses: loading the plugin list (every command, every
hook) imports no store backend nor the worker, and ``import scopemem`` imports no part of the
API until a name is used. Checked in a fresh interpreter, from ``sys.modules``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "apsw", "psycopg", "psycopg_pool", "aiohttp", "mcp", "prometheus_client")


def loaded_after(code: str) -> list[str]:
    """Which of HEAVY (and ``scopemem.api``) ``code`` left imported, run in a new process."""
    script = (f"{code}\nimport json, sys\n"
              f"print(json.dumps([m for m in {(*HEAVY, 'scopemem.api')!r} if m in sys.modules]))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=False, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    loaded: list[str] = json.loads(result.stdout.strip().splitlines()[-1])
    return loaded


def test_loading_every_plugin_imports_no_store_backend() -> None:
    assert loaded_after("from scopemem.plugins.manager import new_plugin_manager\n"
                        "new_plugin_manager()") == []


def test_the_command_line_with_every_command_imports_no_store_backend() -> None:
    code = ("import contextlib, io\n"
            "from scopemem.cli import build_cli\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    build_cli()(['--help'], prog_name='scopemem', standalone_mode=False)")
    assert loaded_after(code) == []


def test_import_scopemem_imports_the_api_on_first_use() -> None:
    assert loaded_after("import scopemem") == []
    assert "scopemem.api" in loaded_after("from scopemem import Memory")


def test_a_store_plugin_imports_its_backend_when_a_store_reads() -> None:
    built = ("import asyncio\n"
             "from scopemem.core.records import Candidate, Kind\n"
             "from scopemem.stores.base import StoreSettings\n"
             "from scopemem.stores import memory\n"
             "found = {}\n"
             "memory.scopemem_register_stores(register=found.__setitem__)\n"
             "store = found['memory'](StoreSettings())\n"
             "asyncio.run(store.write('org:acme', [Candidate(text='deploy with make "
             "bootstrap', kind=Kind.FACT, source_thread_key='t')]))\n")
    assert loaded_after(built) == []
    read = built + "asyncio.run(store.retrieve('org:acme', 'deploy', 5))\n"
    assert loaded_after(read) == ["numpy"]


def test_the_sqlite_store_reads_a_small_scope_without_numpy(tmp_path: Path) -> None:
    code = ("import asyncio\n"
            "from scopemem.core.records import Candidate, Kind\n"
            "from scopemem.stores.base import StoreSettings\n"
            "from scopemem.stores import sqlite\n"
            f"store = sqlite.from_settings(StoreSettings(options={{'path': {str(tmp_path)!r}}}))\n"
            "async def main():\n"
            "    await store.write('org:acme', [Candidate(text='deploy with make bootstrap', "
            "kind=Kind.FACT, source_thread_key='t')])\n"
            "    assert await store.retrieve('org:acme', 'deploy', 5)\n"
            "    await store.close()\n"
            "asyncio.run(main())\n")
    assert "numpy" not in loaded_after(code)
