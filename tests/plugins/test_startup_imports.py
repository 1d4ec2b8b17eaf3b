"""A command pays only for what it uses: loading the plugin list (every command, every
hook) imports no store backend nor the worker, ``--help`` and a hook with memory off import
none of what only reading or writing records needs (the wire converter's cattrs, asyncio,
the text rules and their ``regex``, the secret rules), and ``import scopemem`` imports no
part of the API until a name is used. Checked in a fresh interpreter, from ``sys.modules``
or from the modules ``python -X importtime`` reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "apsw", "psycopg", "psycopg_pool", "aiohttp", "mcp", "prometheus_client",
         "opentelemetry")
#: What only a command that reads or writes records needs.
RECORD_WORK = ("cattrs", "asyncio", "regex", "detect_secrets", "scopemem.secrets",
               "scopemem.core.text", "scopemem.stores.base", "scopemem.api")


def loaded_after(code: str, watched: tuple[str, ...] = (*HEAVY, "scopemem.api")) -> list[str]:
    """Which of ``watched`` ``code`` left imported, run in a new process."""
    script = (f"{code}\nimport json, sys\n"
              f"print(json.dumps([m for m in {watched!r} if m in sys.modules]))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=False, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    loaded: list[str] = json.loads(result.stdout.strip().splitlines()[-1])
    return loaded


def test_loading_every_plugin_imports_no_store_backend() -> None:
    assert loaded_after("from scopemem.plugins.manager import new_plugin_manager\n"
                        "new_plugin_manager()") == []


HELP = ("import contextlib, io\n"
        "from scopemem.cli import build_cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    build_cli()(['--help'], prog_name='scopemem', standalone_mode=False)")


def test_the_command_line_with_every_command_imports_no_store_backend() -> None:
    assert loaded_after(HELP) == []


def test_help_imports_nothing_only_record_work_needs() -> None:
    # Nor the TOML parser: --help reads no configuration.
    assert loaded_after(HELP, (*RECORD_WORK, "tomllib")) == []


def test_loading_every_plugin_imports_no_store_module() -> None:
    stores = tuple(f"scopemem.stores.{name}" for name in ("null", "memory", "worker", "base"))
    assert loaded_after("from scopemem.plugins.manager import new_plugin_manager\n"
                        "new_plugin_manager()", stores) == []


def imported_by(argv: list[str], stdin: str, cwd: Path) -> set[str]:
    """Every module the command ``python -m scopemem *argv`` imported (it may leave with
    ``os._exit``, as a hook does, so they are read from ``-X importtime``)."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "scopemem", *argv],
                            input=stdin, capture_output=True, text=True, check=False, cwd=cwd,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    return {line.rpartition("|")[2].strip() for line in result.stderr.splitlines()
            if line.startswith("import time:")}


def test_a_hook_with_memory_off_imports_nothing_only_record_work_needs(tmp_path: Path) -> None:
    config = tmp_path / "off.toml"
    config.write_text("[memory]\nenabled = false\n", encoding="utf-8")
    prompt = json.dumps({"session_id": "s1", "hook_event_name": "UserPromptSubmit",
                         "prompt": "why do the tests fail?", "cwd": str(tmp_path)})
    modules = imported_by(["--config", str(config), "hook", "user-prompt-submit"], prompt,
                          tmp_path)
    assert "scopemem.agent_hooks.runner" in modules  # the hook did run
    # Reading the configuration takes cattrs; checking its languages, the libraries' lists
    # (not the word rules); nothing else a read or a write needs.
    unused = {*RECORD_WORK, *HEAVY, "scopemem.agent_hooks.transcript",
              "scopemem.core.reflection", "scopemem.core.words"} - {"cattrs"}
    assert not modules & unused, sorted(modules & unused)


def test_import_scopemem_imports_the_api_on_first_use() -> None:
    assert loaded_after("import scopemem") == []
    assert "scopemem.api" in loaded_after("from scopemem import Memory")


def test_a_store_plugin_imports_its_backend_when_a_store_reads() -> None:
    built = ("import asyncio\n"
             "from scopemem.core.records import Candidate, Kind\n"
             "from scopemem.stores.base import StoreSettings\n"
             "from scopemem.stores.registration import memory\n"
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


def test_a_hook_reading_the_sqlite_store_imports_no_write_path(tmp_path: Path) -> None:
    config = tmp_path / "sqlite.toml"
    config.write_text(f'[memory]\nenabled = true\norganization = "acme"\nstore = "sqlite"\n'
                      f'[memory.stores.sqlite]\npath = "{tmp_path / "data"}"\n'
                      f'[memory.hooks]\nsubject = "alice"\nstate_dir = "{tmp_path / "state"}"\n',
                      encoding="utf-8")
    prompt = json.dumps({"session_id": "s1", "hook_event_name": "UserPromptSubmit",
                         "prompt": "why do the tests fail?", "cwd": str(tmp_path)})
    modules = imported_by(["--config", str(config), "hook", "user-prompt-submit"], prompt,
                          tmp_path)
    assert "scopemem.stores.sqlite_shared.store" in modules  # the hook did read
    # Redaction, the status gate and reflection are a write's; a read loads none of them.
    # Nor OpenTelemetry: a read is traced only in a process that set a tracer provider.
    unused = {"numpy", "detect_secrets", "scopemem.secrets", "scopemem.core.gate",
              "scopemem.api.reflecting", "scopemem.core.reflection",
              "scopemem.agent_hooks.transcript", "opentelemetry"}
    assert not modules & unused, sorted(modules & unused)
