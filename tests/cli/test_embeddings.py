"""``scopemem embeddings backfill`` on a real SQLite data directory, with the deterministic
fake embedder registered as a plugin (``tests/fake_embedder.py``): it embeds what has no
vector, and a run killed half way is resumed by running it again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result

from scopemem.cli import build_cli
from scopemem.plugins.manager import new_plugin_manager
from scopemem.stores.sqlite_shared import SharedSqliteStore
from tests.conftest import fact
from tests.fake_embedder import FakeEmbedder, Plugin

MODEL = "fake/concepts"
REPO_ROOT = Path(__file__).resolve().parents[2]


def config(tmp_path: Path, embeddings: str | None = MODEL) -> Path:
    path = tmp_path / "scopemem.toml"
    lane = f'embeddings = "{embeddings}"\n' if embeddings else ""
    path.write_text(f'[memory]\nenabled = true\norganization = "acme"\nstore = "sqlite"\n'
                    f'{lane}[memory.stores.sqlite]\npath = "{tmp_path / "data"}"\n')
    return path


def run(path: Path, embedder: FakeEmbedder, *args: str) -> Result:
    cli = build_cli(new_plugin_manager(environ={}, extra_plugins=(Plugin(embedder),)))
    return CliRunner().invoke(cli, ["--config", str(path), "embeddings", "backfill", *args])


def fill(tmp_path: Path, counts: dict[str, int]) -> None:
    async def write() -> None:
        store = SharedSqliteStore(tmp_path / "data")
        try:
            for scope, count in counts.items():
                await store.write(scope, [fact(f"{scope} lesson {n} about caching layer {n}")
                                          for n in range(count)])
        finally:
            await store.close()

    asyncio.run(write())


def missing(tmp_path: Path, scope: str, model: str = MODEL) -> int:
    async def count() -> int:
        store = SharedSqliteStore(tmp_path / "data")
        try:
            return len(await store.vectors_missing(scope, model, 1000))
        finally:
            await store.close()

    return asyncio.run(count())


def test_backfill_embeds_every_scope_then_nothing(tmp_path):
    fill(tmp_path, {"org:acme": 40, "repo:acme/api": 3})
    embedder = FakeEmbedder()
    result = run(config(tmp_path), embedder)
    assert result.exit_code == 0, result.output
    # No progress bar where stderr is no terminal (a pipe, a log, a script's capture).
    assert result.output == f"embedded 43 record(s) with {MODEL}\n"
    assert missing(tmp_path, "org:acme") == missing(tmp_path, "repo:acme/api") == 0
    again = FakeEmbedder()
    assert "embedded 0 record(s)" in run(config(tmp_path), again).output
    assert again.calls == []


# Runs the CLI in a process of its own whose embedder kills that process (SIGKILL: no
# cleanup, no flush) when asked for its second batch.
_KILLED_RUN = """
import os, signal, sys
from scopemem.cli import build_cli
from scopemem.plugins.manager import new_plugin_manager
from tests.fake_embedder import FakeEmbedder, Plugin

class Killing(FakeEmbedder):
    async def embed(self, *, model, texts):
        if self.calls:
            os.kill(os.getpid(), signal.SIGKILL)
        return await super().embed(model=model, texts=texts)

build_cli(new_plugin_manager(environ={}, extra_plugins=(Plugin(Killing()),)))(
    ["--config", sys.argv[1], "embeddings", "backfill", "--scope", "org:acme"])
"""


def test_a_backfill_killed_half_way_resumes_where_it_stopped(tmp_path):
    fill(tmp_path, {"org:acme": 70})
    killed = subprocess.run([sys.executable, "-c", _KILLED_RUN, str(config(tmp_path))],
                            cwd=REPO_ROOT, capture_output=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    assert missing(tmp_path, "org:acme") == 70 - 32  # the first batch was kept
    steady = FakeEmbedder()
    result = run(config(tmp_path), steady, "--scope", "org:acme")
    assert result.exit_code == 0, result.output
    assert "embedded 38 record(s)" in result.output
    assert sum(map(len, steady.calls)) == 38  # nothing embedded twice
    assert missing(tmp_path, "org:acme") == 0


def test_a_failing_embedder_stops_with_how_to_resume(tmp_path):
    fill(tmp_path, {"org:acme": 40})
    result = run(config(tmp_path), FakeEmbedder(fail_after=1))
    assert result.exit_code == 1
    assert "32 record(s) embedded; run again to resume" in result.output
    assert "Traceback" not in result.output


def test_backfill_with_the_lane_off_is_a_clear_error(tmp_path):
    fill(tmp_path, {"org:acme": 1})
    result = run(config(tmp_path, embeddings=None), FakeEmbedder())
    assert result.exit_code == 1 and "semantic lane is off" in result.output


def test_backfill_on_postgres_embeds_and_closes_its_pool(tmp_path):
    from tests.cli.test_forget_person import postgres_config
    from tests.cli.test_porting import line, ok
    from tests.cli.test_porting import run as run_plain
    from tests.stores import pg

    pg.require()
    schema = pg.new_schema()
    try:
        plain = postgres_config(tmp_path, schema)
        ok(run_plain(plain, "import", "-",
                     stdin="\n".join(line(n) for n in (1, 2, 3)).encode()))
        lane = tmp_path / "lane.toml"
        lane.write_text(plain.read_text().replace("[memory]\n",
                                                  f'[memory]\nembeddings = "{MODEL}"\n'))
        embedder = FakeEmbedder()
        result = run(lane, embedder)
        assert result.exit_code == 0, result.output
        assert f"embedded 3 record(s) with {MODEL}" in result.output
        assert "Traceback" not in result.output
        assert "embedded 0 record(s)" in run(lane, FakeEmbedder()).output
    finally:
        pg.drop_schemas(schema)


def test_backfill_of_every_scope_from_a_store_that_cannot_list_them_is_a_clear_error(
        tmp_path, monkeypatch):
    path = tmp_path / "scopemem.toml"
    path.write_text(f'[memory]\nenabled = true\norganization = "acme"\nstore = "worker"\n'
                    f'embeddings = "{MODEL}"\n[memory.stores.worker]\n'
                    'base_url = "http://127.0.0.1:1"\ntimeout_seconds = 1\n'
                    'retry_deadline_seconds = 1\n')
    monkeypatch.setenv("MEMORY_TOKEN", "a-token-long-enough-0123")
    embedder = FakeEmbedder()
    result = run(path, embedder)
    assert result.exit_code == 1, result.output
    assert "/scopes failed" in result.output and "run again" in result.output
    assert isinstance(result.exception, SystemExit)  # a click error, not a traceback
    assert embedder.calls == []


def test_backfill_of_a_scope_word_or_a_bad_key_is_a_usage_error(tmp_path):
    # `--scope org` (a scope word, as `remember` takes it) names no scope: it embedded
    # nothing and said "embedded 0 record(s)"; a key with a space said "run again to resume".
    fill(tmp_path, {"org:acme": 2})
    for value in ("org", "bad key"):
        embedder = FakeEmbedder()
        result = run(config(tmp_path), embedder, "--scope", value)
        assert result.exit_code == 2, result.output
        assert "'--scope'" in result.output and "run again" not in result.output
        assert embedder.calls == []
    assert missing(tmp_path, "org:acme") == 2


def served(tmp_path: Path, base_url: str) -> Path:
    """A config whose lane is the ``openai`` embedder at ``base_url`` (``tests.fake_model``)."""
    path = config(tmp_path, "openai/fake-embedder")
    path.write_text(path.read_text() + f'[memory.embedders.openai]\nbase_url = "{base_url}"\n'
                    'timeout_seconds = 5\n')
    return path


def test_backfill_goes_on_past_a_text_the_embedder_refuses(tmp_path):
    # vLLM serving a 512-token model answers 400 to a longer text: the backfill failed at
    # that batch at every run ("run again to resume") and no record of the scope got a
    # vector.
    from tests.api.test_semantic_refusals import LIMIT, LONG, SHORT
    from tests.fake_model import fake_model_server

    fill_texts(tmp_path, "org:acme", [LONG, *SHORT])
    with fake_model_server() as server:
        server.embed_limit = LIMIT
        cli = build_cli(new_plugin_manager(environ={}))
        result = CliRunner().invoke(cli, ["--config", str(served(tmp_path, server.base_url)),
                                          "embeddings", "backfill"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[-1] == "embedded 3 record(s) with openai/fake-embedder"
    (refused,) = [line for line in lines if "refused" in line]
    assert refused.startswith("1 record(s) got no vector: the embedder refused their text "
                              "(the first, mem:org:acme:1: openai: HTTP 400")
    assert "maximum context length" in refused and "run again" not in result.output
    assert missing(tmp_path, "org:acme", "openai/fake-embedder") == 1


def test_backfill_against_a_server_that_is_down_asks_once_and_stops(tmp_path):
    from tests.fake_model import fake_model_server

    fill(tmp_path, {"org:acme": 4})
    with fake_model_server() as server:
        server.embed_status = 500
        cli = build_cli(new_plugin_manager(environ={}))
        result = CliRunner().invoke(cli, ["--config", str(served(tmp_path, server.base_url)),
                                          "embeddings", "backfill"])
        assert len(server.embedded) == 1
    assert result.exit_code == 1, result.output
    assert "HTTP 500" in result.output and "run again to resume" in result.output


def fill_texts(tmp_path: Path, scope: str, texts: list[str]) -> None:
    async def write() -> None:
        store = SharedSqliteStore(tmp_path / "data")
        try:
            await store.write(scope, [fact(text) for text in texts])
        finally:
            await store.close()

    asyncio.run(write())
