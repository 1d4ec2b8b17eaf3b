"""``scopemem export`` and ``scopemem import`` through click's CliRunner: real SQLite data
directories, and a live Memory Worker (``scopemem serve`` in a subprocess)."""

from __future__ import annotations

import json
import os
import shutil
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from scopemem.cli import build_cli, port_stream
from scopemem.core.porting import record_line
from scopemem.core.records import MAX_EXPORT_PAGE, Kind, Record, Status
from scopemem.plugins.manager import new_plugin_manager
from scopemem.secrets import redact
from scopemem.stores.sqlite_shared import SharedSqliteStore
from tests.cli.test_memory_commands import worker  # noqa: F401 - the live worker fixture
from tests.secret_corpus import CORPUS
from tests.stores import pg

ADMIN = "user:cli:local"
TOKEN = "cli-token-0123456789"
YEAR_2100 = 4_102_444_800_000


def sqlite_config(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(f'[memory]\nenabled = true\norganization = "acme"\nadmins = ["{ADMIN}"]\n'
                    f'store = "sqlite"\n[memory.stores.sqlite]\npath = "{tmp_path / name}"\n')
    return path


def run(config: Path, *args: str, stdin: bytes | None = None) -> Result:
    cli = build_cli(new_plugin_manager(environ={}))
    return CliRunner().invoke(cli, ["--config", str(config), *args], input=stdin,
                              env={"MEMORY_TOKEN": TOKEN})


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def line(seq: int, scope_key: str = "org:acme", **fields: object) -> str:
    values: dict[str, object] = {"id": f"mem:{scope_key}:{seq}", "scope_key": scope_key,
                                 "kind": Kind.FACT, "text": f"imported fact {seq}",
                                 "source_thread_key": "t/1", "created_at": 1000 + seq}
    values.update(fields)
    return record_line(Record(**values))  # type: ignore[arg-type]


def populate(config: Path) -> None:
    for scope, text in (("org", "deploys need the vpn"), ("org", "staging is in eu-west"),
                        ("me", "I review on mondays"), ("org", "the build uses node 20")):
        ok(run(config, "remember", "--scope", scope, text))
    ok(run(config, "forget", "mem:org:acme:2"))
    ok(run(config, "remember", "--scope", "org", "the build uses node 22",
           "--supersedes", "mem:org:acme:3"))
    ok(run(config, "list", "deploy"))


def test_sqlite_to_jsonl_to_sqlite_to_jsonl_is_the_same_file(tmp_path: Path):
    first, second = sqlite_config(tmp_path, "first"), sqlite_config(tmp_path, "second")
    populate(first)
    exported = tmp_path / "first.jsonl"
    ok(run(first, "export", "--all", "--operator", "--out", str(exported)))
    lines = exported.read_text(encoding="utf-8").splitlines()
    assert {json.loads(text)["status"] for text in lines} == {"active", "forgotten",
                                                              "superseded"}
    assert [json.loads(text)["scopeKey"] for text in lines] == ["org:acme"] * 4 + [ADMIN]
    assert "imported 5 of 5 records" in ok(run(second, "import", "--trust-source",
                                                str(exported))).output
    again = ok(run(second, "export", "--all", "--operator"))
    assert again.stdout_bytes == exported.read_bytes()
    assert "exported 5 records" in again.stderr
    # A re-import, here from stdin, adds nothing.
    result = ok(run(second, "import", "-", "--json", "--trust-source",
                    stdin=exported.read_bytes()))
    assert json.loads(result.stdout) == {"ok": True, "read": 5, "imported": 0,
                                         "dryRun": False, "redacted": 0, "swept": 0,
                                         "dropped": 0, "sourceReset": 0}
    assert ok(run(second, "export", "--scope", ADMIN)).stdout_bytes.decode().splitlines() \
        == lines[4:]


def test_a_directory_moves_to_another_by_export_and_import(tmp_path: Path):
    """Every record, status and count arrives, and the import can be run again, after a
    crash or not, adding nothing twice."""
    first, moved = sqlite_config(tmp_path, "first"), sqlite_config(tmp_path, "moved")
    populate(first)
    exported = tmp_path / "first.jsonl"
    ok(run(first, "export", "--all", "--operator", "--out", str(exported)))
    assert "imported 5 of 5 records" in ok(run(moved, "import", "--trust-source",
                                               str(exported))).output
    assert "imported 0 of 5 records" in ok(run(moved, "import", "--trust-source",
                                               str(exported))).output
    assert ok(run(moved, "export", "--all", "--operator")).stdout_bytes == exported.read_bytes()
    assert any(name.startswith("shard-") for name in os.listdir(tmp_path / "moved"))
    # The next write there gets an id above every imported one.
    ok(run(moved, "remember", "--scope", "org", "the vpn moved to wireguard"))
    ids = [json.loads(text)["id"] for text in
           ok(run(moved, "export", "--scope", "org:acme")).stdout_bytes.decode().splitlines()]
    assert ids[-1] == "mem:org:acme:5"


def test_sqlite_to_jsonl_to_the_worker_to_jsonl_is_the_same_file(tmp_path: Path, worker):  # noqa: F811
    first = sqlite_config(tmp_path, "first")
    org = f"org:port{tmp_path.name.replace('_', '').replace('-', '')}"
    ok(run(first, "remember", "--scope", "org", "deploys need the vpn"))
    exported = ok(run(first, "export", "--scope", "org:acme")).stdout_bytes
    moved = exported.replace(b"org:acme", org.encode())  # the worker is shared by tests
    served = tmp_path / "worker.toml"
    served.write_text(f'[memory]\nenabled = true\norganization = "acme"\nstore = "worker"\n'
                      f'[memory.stores.worker]\nbase_url = "{worker}"\n')
    # The worker vouches for no source: the person's record arrives reflection-sourced,
    # and the operator's --trust-source is refused there rather than ignored.
    result = run(served, "import", "--trust-source", "-", stdin=moved)
    assert result.exit_code == 2 and "imports every record as reflection-sourced" in \
        result.output
    assert "1 source reset to reflection" in ok(run(served, "import", "-",
                                                    stdin=moved)).output
    assert ok(run(served, "export", "--scope", org, "--operator")).stdout_bytes == moved.replace(
        b'"source":"human"', b'"source":"reflection"')
    assert "imported 0 of 1" in ok(run(served, "import", "-", stdin=moved)).output


def test_sqlite_to_jsonl_to_postgres_to_jsonl_is_the_same_file(tmp_path: Path):
    pg.require()
    first = sqlite_config(tmp_path, "first")
    populate(first)
    exported = ok(run(first, "export", "--all", "--operator")).stdout_bytes
    schema = pg.new_schema()
    served = tmp_path / "postgres.toml"
    served.write_text(f'[memory]\nenabled = true\norganization = "acme"\nadmins = ["{ADMIN}"]\n'
                      f'store = "postgres"\n[memory.stores.postgres]\ndsn = "{pg.dsn()}"\n'
                      f'schema = "{schema}"\n')
    try:
        assert "imported 5 of 5 records" in ok(run(served, "import", "--trust-source", "-",
                                                   stdin=exported)).output
        assert ok(run(served, "export", "--all", "--operator")).stdout_bytes == exported
        assert "imported 0 of 5" in ok(run(served, "import", "--trust-source", "-",
                                           stdin=exported)).output
        # A write after the import gets an id above every imported one (org:acme: 1-4).
        ok(run(served, "remember", "--scope", "org", "the deploy window is friday"))
        listed = ok(run(served, "list", "deploy window")).output
        assert "mem:org:acme:5 fact" in listed, listed
    finally:
        pg.drop_schemas(schema)


@pytest.mark.parametrize(("bad", "says"), [
    ("{not json", "line 3: not valid JSON"),
    (json.dumps({"id": "mem:org:acme:3"}), "line 3: required field missing @ $.scopeKey"),
    (line(3).replace('"id":"mem:org:acme:3"', '"id":"mem:user:slack:U9:3"'),
     "line 3: id 'mem:user:slack:U9:3' is not mem:org:acme:<n>"),
    (line(3).replace('"useCount":0', '"useCount":"0"'), "line 3: expected int"),
    (line(3).replace('"status":"active"', '"status":"lost"'), "line 3:"),
    (line(3).replace('"keywords":[]', '"keywords":"deploy"'), "line 3: expected a list"),
    (line(3, text="x" * 4001), "line 3: text must be at most 4000 characters"),
    (line(3, created_at=YEAR_2100), "line 3: createdAt 4102444800000 is in the future"),
    (line(3, last_used_at=YEAR_2100), "line 3: lastUsedAt 4102444800000 is in the future"),
    (line(3, use_count=10**12), "line 3: useCount 1000000000000 is above 1000000000"),
])
def test_a_bad_line_is_named_and_its_batch_is_not_written(tmp_path: Path, bad: str,
                                                         says: str):
    config = sqlite_config(tmp_path, "data")
    source = tmp_path / "bad.jsonl"
    source.write_text("\n".join([line(1), line(2), bad, line(4)]) + "\n", encoding="utf-8")
    result = run(config, "import", str(source))
    assert result.exit_code == 1
    assert says in result.output and "nothing was written" in result.output
    assert "Traceback" not in result.output
    assert ok(run(config, "export", "--all", "--operator")).stdout_bytes == b""


def test_lines_that_are_not_utf8_or_too_long_are_named(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch):
    config = sqlite_config(tmp_path, "data")
    source = tmp_path / "bytes.jsonl"
    source.write_bytes(line(1).encode() + b"\n" + b'{"id": "\xff\xfe"}\n')
    result = run(config, "import", str(source))
    assert result.exit_code == 1 and "line 2: not UTF-8 text" in result.output
    monkeypatch.setattr(port_stream, "MAX_LINE_BYTES", 300)
    source.write_text(line(1) + "\n" + line(2, text="y" * 400) + "\n" + line(3) + "\n")
    result = run(config, "import", str(source))
    assert result.exit_code == 1 and "line 2: longer than 300 bytes" in result.output
    assert ok(run(config, "export", "--all", "--operator")).stdout_bytes == b""


def test_batches_before_a_bad_line_stay_written(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(port_stream, "IMPORT_BATCH", 2)
    config = sqlite_config(tmp_path, "data")
    source = tmp_path / "bad.jsonl"
    source.write_text("\n".join([line(1), line(2), "", line(3), "[]", line(4)]) + "\n")
    result = run(config, "import", str(source))
    assert result.exit_code == 1
    assert "line 5: a record must be a JSON object" in result.output
    assert "lines 1-2 were written, nothing from line 3 on" in result.output
    exported = ok(run(config, "export", "--all", "--operator")).stdout_bytes.decode().splitlines()
    assert exported == [line(1), line(2)]
    # The corrected file goes in whole; what was written is skipped.
    source.write_text("\n".join([line(1), line(2), line(3), line(4)]) + "\n")
    assert "imported 2 of 4 records" in ok(run(config, "import", str(source))).output


def test_a_dry_run_checks_every_line_and_writes_nothing(tmp_path: Path):
    config = sqlite_config(tmp_path, "data")
    source = tmp_path / "good.jsonl"
    source.write_text("\n".join(line(n) for n in range(1, 4)) + "\n")
    assert "3 valid records" in ok(run(config, "import", "--dry-run", str(source))).output
    assert ok(run(config, "export", "--all", "--operator")).stdout_bytes == b""


def test_a_file_a_windows_editor_saved_with_a_byte_order_mark_imports(tmp_path: Path):
    config = sqlite_config(tmp_path, "data")
    source = tmp_path / "notepad.jsonl"
    source.write_bytes(b"\xef\xbb\xbf" + "\n".join(line(n) for n in range(1, 4)).encode()
                       + b"\n")
    assert "3 valid records" in ok(run(config, "import", "--dry-run", str(source))).output
    # Only at the very start: a mark on a later line is no JSON.
    source.write_bytes(("\n".join(line(n) for n in range(1, 3)) + "\n").encode()
                       + b"\xef\xbb\xbf" + line(3).encode() + b"\n")
    assert run(config, "import", "--dry-run", str(source)).exit_code != 0


def _screened_file(path: Path) -> Path:
    """Every corpus secret, a person's fact, a fact the status gate refuses, a plain one."""
    lines = [line(n, text=secret.text, keywords=("credentials", secret.kind))
             for n, secret in enumerate(CORPUS, 1)]
    lines += [line(101, text="I deploy on fridays", source="human"),
              line(102, text="PR 1835 was pushed at sha 3f9a2c1 with all tests passing"),
              line(103, text="deploys need the vpn")]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_an_import_is_screened_as_every_write_is(tmp_path: Path):
    """Secrets are redacted, a fact the status gate refuses is kept swept, a person's
    record is reflection's unless the operator vouches for the file; the summary counts
    each, and a dry run says what the import would do."""
    config = sqlite_config(tmp_path, "data")
    source = _screened_file(tmp_path / "screened.jsonl")
    total = len(CORPUS) + 3
    dry = ok(run(config, "import", "--dry-run", "--json", str(source))).stdout
    counts = json.loads(dry)
    redacted = sum(redact(secret.text) != secret.text for secret in CORPUS)
    assert counts == {"ok": True, "read": total, "imported": 0, "dryRun": True,
                      "redacted": redacted, "swept": 1, "dropped": 0, "sourceReset": 1}
    output = ok(run(config, "import", str(source))).output
    assert output.splitlines() == [
        f"screened: {redacted} redacted, 1 swept by the status gate, 1 source reset to"
        " reflection (no --trust-source)", f"imported {total} of {total} records (0 already"
        " present)"]
    exported = ok(run(config, "export", "--all", "--operator")).stdout_bytes.decode()
    assert [secret.kind for secret in CORPUS if secret.raw in exported] == []
    records = {item["id"]: item for item in map(json.loads, exported.splitlines())}
    assert records["mem:org:acme:101"]["source"] == "reflection"
    assert records["mem:org:acme:102"]["status"] == "swept"
    assert records["mem:org:acme:103"]["status"] == "active"
    assert "deploys need the vpn" in ok(run(config, "list", "deploy")).output
    # The operator's own export, vouched for: a person's record stays a person's.
    trusted = sqlite_config(tmp_path, "trusted")
    ok(run(trusted, "import", "--trust-source", str(source)))
    exported = ok(run(trusted, "export", "--scope", "org:acme")).stdout_bytes.decode()
    assert '"text":"I deploy on fridays","keywords":[],"sourceThreadKey":"t/1",' \
        '"createdAt":1101,"useCount":0,"status":"active","source":"human"' in exported


def test_an_imported_forgotten_record_stays_scrubbed(tmp_path: Path):
    config = sqlite_config(tmp_path, "data")
    forgotten = line(1, text="the old deploy key", keywords=("deploy",),
                     status=Status.FORGOTTEN)
    ok(run(config, "import", "-", stdin=forgotten.encode() + b"\n"))
    exported = ok(run(config, "export", "--all", "--operator")).stdout_bytes.decode()
    assert '"text":""' in exported and "deploy" not in exported


def test_stores_that_cannot_keep_an_import_are_refused(tmp_path: Path):
    off = tmp_path / "off.toml"
    off.write_text("[memory]\nenabled = false\n")
    result = run(off, "export", "--all", "--operator")
    assert result.exit_code == 1 and "memory is off" in result.output
    null = tmp_path / "null.toml"
    null.write_text('[memory]\nenabled = true\norganization = "acme"\nstore = "null"\n')
    result = run(null, "export", "--all", "--operator")
    assert result.exit_code == 1 and "'null' cannot export or import records" in result.output
    in_process = tmp_path / "memory.toml"
    in_process.write_text('[memory]\nenabled = true\norganization = "acme"\nstore = "memory"\n')
    result = run(in_process, "import", "-", stdin=(line(1) + "\n").encode())
    assert result.exit_code == 1 and "in this process only" in result.output
    result = run(in_process, "export")
    assert result.exit_code == 2 and "--scope KEY or --all" in result.output
    result = run(in_process, "import", str(tmp_path / "missing.jsonl"))
    assert result.exit_code == 1 and "cannot read" in result.output


def test_a_progress_bar_shows_only_on_a_terminal(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch):
    config = sqlite_config(tmp_path, "data")
    source = tmp_path / "good.jsonl"
    source.write_text("\n".join(line(n) for n in range(1, 4)) + "\n")
    result = ok(run(config, "import", str(source)))
    assert "importing" not in result.stderr
    monkeypatch.setattr(port_stream, "stderr_is_terminal", lambda: True)
    result = ok(run(config, "export", "--all", "--operator", "--out", str(tmp_path / "out.jsonl")))
    assert "exporting" in result.stderr
    result = ok(run(sqlite_config(tmp_path, "other"), "import", str(source)))
    assert "importing" in result.stderr


_WORDS = ("deploy", "staging", "review", "license", "cluster", "vpn", "build")


def _large_file(path: Path, total: int) -> Path:
    # Texts from a few words: the analyzer's (bounded) cache of stems stays out of the count.
    with path.open("w", encoding="utf-8") as out:
        for n in range(1, total + 1):
            out.write(line(n, scope_key=f"user:slack:U{n % 3}",
                           text=f"imported {_WORDS[n % 7]} fact") + "\n")
    return path


def _import_peak(config: Path, source: Path) -> int:
    """The most Python memory an import of ``source`` held at once, in bytes."""
    tracemalloc.start()
    try:
        ok(run(config, "import", str(source)))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_large_file_streams_in_bounded_batches(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch):
    """Memory stays flat: no import call holds more than ``IMPORT_BATCH`` records, no
    export call reads more than a page, and an import of four times the records peaks at
    about the same memory (counted, not timed). The batch is made smaller than the
    shipped one, so a file of many batches is quick to import."""
    imports: list[int] = []
    pages: list[int] = []
    real_import, real_page = SharedSqliteStore.import_records, SharedSqliteStore.export_page

    async def spy_import(self, records):  # type: ignore[no-untyped-def]
        imports.append(len(records))
        return await real_import(self, records)

    async def spy_page(self, scope_key, after, limit):  # type: ignore[no-untyped-def]
        page = await real_page(self, scope_key, after, limit)
        pages.append(len(page))
        return page

    monkeypatch.setattr(SharedSqliteStore, "import_records", spy_import)
    monkeypatch.setattr(SharedSqliteStore, "export_page", spy_page)
    batch = 100
    monkeypatch.setattr(port_stream, "IMPORT_BATCH", batch)
    small_file = _large_file(tmp_path / "small.jsonl", 4 * batch)
    # A first import pays once for what any import loads (modules, caches): the two
    # measured below differ only in the file's size.
    _import_peak(sqlite_config(tmp_path, "warm"), small_file)
    small = _import_peak(sqlite_config(tmp_path, "small"), small_file)
    total = 16 * batch
    source = _large_file(tmp_path / "large.jsonl", total)
    imports.clear()
    config = sqlite_config(tmp_path, "data")
    large = _import_peak(config, source)
    assert max(imports) == batch and sum(imports) == total and len(imports) == 16
    assert large < small * 1.25, (small, large)  # four times the file, not four times the peak
    out = tmp_path / "again.jsonl"
    ok(run(config, "export", "--all", "--operator", "--out", str(out)))
    assert max(pages) == MAX_EXPORT_PAGE and sum(pages) == total
    assert sorted(out.read_text().splitlines()) == sorted(source.read_text().splitlines())


def test_export_of_a_file_layout_directory_migrates_it_and_gives_every_record(tmp_path: Path):
    """The default configuration on a directory of the file layout (the fixture written by
    it, ``tests/stores/test_sqlite_migrate.py``): the first command migrates it, and the
    export is the one the file layout gave, byte for byte."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "file-layout-2026-12-07"
    data = tmp_path / "data"
    shutil.copytree(fixture / "data", data)
    config = tmp_path / "memory.toml"
    config.write_text(f'[memory]\nenabled = true\norganization = "acme"\n'
                      f'admins = ["{ADMIN}"]\nstore = "sqlite"\n'
                      f'[memory.stores.sqlite]\npath = "{data}"\n')
    exported = ok(run(config, "export", "--all", "--operator"))
    assert exported.stdout_bytes == (fixture / "export.jsonl").read_bytes()
    assert sorted(p.name for p in (data / "file-layout-backup").glob("*.db")) == sorted(
        p.name for p in (fixture / "data").glob("*.db"))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_an_export_to_a_full_disk_is_one_error_and_leaves_the_last_backup(tmp_path: Path):
    """``/dev/full`` answers every write with ENOSPC, as a full disk does: the export stops
    with one error line naming the file and the cause, the backup it would have replaced
    stays as it was and no partial file is left, where the command ended in a traceback."""
    import subprocess
    import sys

    config = sqlite_config(tmp_path, "data")
    populate(config)
    out = tmp_path / "memory.jsonl"
    out.write_text("yesterday's backup\n")
    (tmp_path / "memory.jsonl.partial").symlink_to("/dev/full")
    result = run(config, "export", "--all", "--operator", "--out", str(out))
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert f"cannot write {out}" in result.output
    assert "No space left on device" in result.output
    assert out.read_text() == "yesterday's backup\n"
    assert not os.path.lexists(tmp_path / "memory.jsonl.partial")
    with open("/dev/full", "wb") as full:
        piped = subprocess.run(
            [sys.executable, "-m", "scopemem", "--config", str(config), "export", "--all",
             "--operator"], stdout=full, stderr=subprocess.PIPE, timeout=120, check=False)
    stderr = piped.stderr.decode()
    assert piped.returncode == 1, stderr
    assert "Traceback" not in stderr
    assert "cannot write the export to stdout: No space left on device" in stderr


def test_an_import_the_store_stops_says_what_was_written_and_how_to_go_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A store that refuses a batch (here a new scope past ``max_scopes``) stops the import
    with its reason and what was written before it, as a bad line does, where the operator
    learnt only the reason. Importing again, the limit raised, adds the rest."""
    monkeypatch.setattr(port_stream, "IMPORT_BATCH", 3)
    config = tmp_path / "data.toml"
    settings = (f'[memory]\nenabled = true\norganization = "acme"\nstore = "sqlite"\n'
                f'[memory.stores.sqlite]\npath = "{tmp_path / "data"}"\nmax_scopes = {{}}\n')
    config.write_text(settings.format(2))
    source = tmp_path / "people.jsonl"
    source.write_text("".join(line(n, f"user:slack:V{person}") + "\n"
                              for person in range(5) for n in (1, 2, 3)))
    result = run(config, "import", str(source))
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert "import failed: sqlite store: " in result.output
    assert "(max_scopes = 2)" in result.output
    assert ("6 records were written (the records of lines 1-6 whole); importing the file"
            " again skips them") in result.output
    config.write_text(settings.format(0))
    assert "imported 9 of 15 records (6 already present)" in \
        ok(run(config, "import", str(source))).output


def test_an_import_the_store_stops_within_a_batch_counts_the_scopes_it_wrote(tmp_path: Path):
    """Each scope of a batch is its own transaction: the scopes written before the one the
    store refused are counted, where the import said that nothing was written whole."""
    config = tmp_path / "data.toml"
    config.write_text(f'[memory]\nenabled = true\norganization = "acme"\nstore = "sqlite"\n'
                      f'[memory.stores.sqlite]\npath = "{tmp_path / "data"}"\nmax_scopes = 2\n')
    source = tmp_path / "people.jsonl"
    source.write_text("".join(line(n, f"user:slack:V{person}") + "\n"
                              for person in range(3) for n in (1, 2, 3)))
    result = run(config, "import", str(source))
    assert result.exit_code == 1, result.output
    assert "6 records were written; importing the file again skips them" in result.output
