"""``scopemem serve`` whose data directory is deleted or replaced while it runs: no write is
acknowledged into files no later process opens, and every write acknowledged before is
there once the directory is restored and the worker restarted."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import aiohttp

from tests.worker.test_serve import TOKEN, launch, listening, stop, wait_healthy

AUTH = {"Authorization": f"Bearer {TOKEN}"}
ORG = "org:acme"


async def write(session: aiohttp.ClientSession, url: str, text: str) -> int:
    async with session.post(url + "/write", headers=AUTH, json={
            "scopeKey": ORG, "records": [{"kind": "fact", "sourceThreadKey": "t:1",
                                          "text": text}]}) as response:
        return response.status


async def ready(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(url + "/readyz") as response:
        return response.status


async def texts(session: aiohttp.ClientSession, url: str) -> list[str]:
    async with session.post(url + "/list", headers=AUTH,
                            json={"scopeKey": ORG, "limit": 50}) as response:
        assert response.status == 200
        return sorted(r["text"] for r in (await response.json())["records"])


async def test_a_data_directory_deleted_and_restored_under_serve_loses_nothing_acknowledged(
        tmp_path: Path) -> None:
    data, aside, copy = tmp_path / "data", tmp_path / "aside", tmp_path / "copy"
    acknowledged: list[str] = []
    process = launch(tmp_path, "--data", str(data), "--no-access-log")
    url, _banner = listening(process)
    try:
        await wait_healthy(process, url)
        async with aiohttp.ClientSession() as session:
            for n in range(3):
                assert await write(session, url, f"note number {n}") == 200
                acknowledged.append(f"note number {n}")
            # Moved away: refused (a 5xx, never taken as done), then back: written again.
            os.rename(data, aside)
            assert await write(session, url, "written while the directory is away") >= 500
            assert await ready(session, url) == 503
            assert not data.exists()
            os.rename(aside, data)
            assert await write(session, url, "written once it is back") == 200
            acknowledged.append("written once it is back")
            assert await ready(session, url) == 200
            # Deleted, then restored from a copy of every file: refused until the restart.
            shutil.copytree(data, copy)
            shutil.rmtree(data)
            assert await write(session, url, "written while the directory is gone") >= 500
            shutil.copytree(copy, data)
            assert await write(session, url, "written into the deleted files") >= 500
            assert await ready(session, url) == 503
    finally:
        _out, err = stop(process, signal.SIGTERM)
    assert "restart the process" in err and "Traceback" not in err

    process = launch(tmp_path, "--data", str(data), "--no-access-log")
    url, _banner = listening(process)
    try:
        await wait_healthy(process, url)
        async with aiohttp.ClientSession() as session:
            assert await ready(session, url) == 200
            assert await texts(session, url) == sorted(acknowledged)
    finally:
        stop(process, signal.SIGTERM)
