"""``scopemem serve --log-format json`` as an operator runs it: every line on standard error
is one JSON object, and no line carries a record's text."""

from __future__ import annotations

import json
import signal

import aiohttp
from click.testing import CliRunner

from scopemem.cli import build_cli
from scopemem.stores.worker import WorkerStore
from tests.conftest import fact
from tests.worker.test_serve import ORG, TOKEN, launch, listening, start, stop, wait_healthy

SECRET_TEXT = "the staging database lives on blue-otter"


async def test_json_logs_are_one_object_per_line_without_record_text(tmp_path):
    process, url = start(tmp_path, "--store", "memory", "--log-format", "json")
    try:
        await wait_healthy(process, url)
        store = WorkerStore(url, TOKEN)
        try:
            await store.write(ORG, [fact(SECRET_TEXT)])
            assert [r.text for r in await store.list(ORG, 5)] == [SECRET_TEXT]
        finally:
            await store.close()
        async with aiohttp.ClientSession() as session:
            async with session.post(url + "/write", data=b"{", headers={
                    "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
                                    ) as response:
                assert response.status == 400
            async with session.get(url + "/readyz") as response:
                assert response.status == 200
    finally:
        _out, err = stop(process, signal.SIGTERM)
    lines = err.splitlines()
    assert lines
    entries = [json.loads(line) for line in lines]  # every line, or this raises
    for entry in entries:
        assert {"time", "level", "logger", "message"} <= set(entry), entry
        assert entry["time"].endswith("Z") and "T" in entry["time"]
        assert "trace_id" not in entry  # tracing is off
    messages = [entry["message"] for entry in entries]
    assert any(m == f"[list] {ORG} -> 1" for m in messages)
    assert any("POST /write" in m and entry["logger"] == "aiohttp.access"
               for m, entry in zip(messages, entries, strict=True))
    assert any(m.startswith("shutting down") for m in messages)
    assert SECRET_TEXT not in err and "blue-otter" not in err


def test_log_format_is_checked():
    result = CliRunner().invoke(build_cli(), ["serve", "--log-format", "xml"])
    assert result.exit_code == 2
    assert "'xml' is not one of 'text', 'json'" in result.output


async def test_json_format_makes_the_listening_and_stopped_lines_json_too(tmp_path):
    process = launch(tmp_path, "--store", "memory", "--log-format", "json")
    url, banner = listening(process)  # the helpers that read the line still find the URL
    try:
        await wait_healthy(process, url)
    finally:
        out, _err = stop(process, signal.SIGTERM)
    entries = [json.loads(line) for line in [banner, *out.splitlines()]]
    assert [entry["message"] for entry in entries] == [
        f"scopemem worker listening on {url} (store: memory)", "scopemem worker stopped"]
    for entry in entries:
        assert entry["level"] == "INFO" and entry["logger"] == "scopemem.worker", entry
