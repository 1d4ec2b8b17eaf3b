"""The README tells a newcomer the truth: its walkthrough runs as written against a real
``scopemem serve`` (only the port and the venv path are substituted)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.worker.test_serve import start, stop, wait_healthy

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def block_between(start_marker: str, end_marker: str) -> str:
    section = README.split(start_marker, 1)[1].split(end_marker, 1)[0]
    return re.search(r"```sh\n(.*?)```", section, re.DOTALL).group(1)


def test_quick_start_commands_are_the_ones_ci_and_operators_run():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install --quiet -e '.[test]'" in ci and "-m pytest" in ci
    assert ".venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest -q" in README
    assert ("SCOPEMEM_TOKEN=dev-token-change-me-0001 .venv/bin/scopemem serve"
            " --data ./scopemem-data") in README


async def test_the_walkthrough_runs_against_a_live_worker(tmp_path: Path):
    script = block_between("<!-- walkthrough:start -->", "<!-- walkthrough:end -->")
    process, url = start(tmp_path, "--data", "./scopemem-data", "--no-access-log",
                         token="dev-token-change-me-0001")
    port = url.rsplit(":", 1)[1]
    bin_dir = str(Path(sys.executable).parent) + "/"
    script = script.replace(".venv/bin/", bin_dir).replace("127.0.0.1:8787",
                                                           f"127.0.0.1:{port}")
    try:
        await wait_healthy(process, url)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SCOPEMEM_")}
        completed = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path,
                                   env=env, capture_output=True, text=True, timeout=120,
                                   check=False)
    finally:
        stop(process, signal.SIGTERM)
    out = completed.stdout + completed.stderr
    assert completed.returncode == 0, out
    assert "remembered in org:acme" in out
    assert "reads as one-moment status" in out and "refused" in out
    assert "mem:org:acme:1 fact" in out and "the integration tests need make bootstrap" in out
    assert '"scopeKey": "org:acme"' in out
    assert "Background memory for org:acme + user:slack:U0123" in out
    assert "🧹 Forgot mem:org:acme:1" in out
    assert "\norg:acme\nno active records\n" in completed.stdout
    # The counters say what happened in org:acme: one lesson inserted, forgotten once (the
    # context preview counts nothing).
    [counted] = [line.split() for line in completed.stdout.splitlines()
                 if line.startswith("org:acme ")]
    header = next(line.split() for line in completed.stdout.splitlines()
                  if line.startswith("scope "))
    assert dict(zip(header[1:], counted[1:], strict=True)) == {
        "inserted": "1", "forgotten": "1"}
    # The backup holds the forgotten record, and importing it again adds nothing.
    assert json.loads((tmp_path / "memory.jsonl").read_text())["status"] == "forgotten"
    assert completed.stdout.rstrip().endswith("imported 0 of 1 records (1 already present)")
    assert "exported 1 records" in completed.stderr
    assert list((tmp_path / "scopemem-data").glob("*.db"))
