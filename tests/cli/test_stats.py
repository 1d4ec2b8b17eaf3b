"""``scopemem stats``: the counters and 003's three readings, one command each, as tables
and as JSON, through click's CliRunner against a real SQLite directory."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from scopemem.cli import build_cli
from scopemem.core.counters import DAY_MS, day_label, day_of
from scopemem.core.records import CountRow
from scopemem.plugins.manager import new_plugin_manager
from scopemem.stores.base import wall_clock_ms
from scopemem.stores.sqlite_shared import SharedSqliteStore
from tests.conftest import fact, summary

APP, API = "repo:acme/app", "repo:acme/api"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "scopemem.toml"
    path.write_text('[memory]\nenabled = true\norganization = "acme"\nstore = "sqlite"\n'
                    f'[memory.stores.sqlite]\npath = "{tmp_path / "data"}"\n')
    return path


def stats(config: Path, *args: str) -> Result:
    pm = new_plugin_manager(environ={})
    return CliRunner().invoke(build_cli(pm), ["--config", str(config), "stats", *args])


@pytest.fixture
def filled(tmp_path: Path, config: Path) -> Path:
    now = wall_clock_ms()
    today, yesterday = day_of(now), day_of(now) - 1

    async def fill() -> None:
        store = SharedSqliteStore(tmp_path / "data", clock=lambda: now)
        try:
            await store.write(APP, [fact("make bootstrap before pytest"),
                                    fact("node 20 is pinned in .nvmrc"),
                                    summary("a pytest question")])
            await store.write(API, [fact("run tox -e lint before pushing")])
            await store.add_counts([
                CountRow(APP, today, "offered", 5), CountRow(APP, today, "rejected", 2),
                CountRow(APP, today, "rejected:commit_sha", 2),
                CountRow(APP, today, "rejected:pr_subject", 1),
                CountRow(API, today, "restated", 3), CountRow("org:acme", today, "offered", 4),
                CountRow(APP, yesterday, "inserted", 7)])
        finally:
            await store.close()

    asyncio.run(fill())
    return config


def test_lessons_per_repository_per_day(filled):
    result = stats(filled, "lessons", "--since", "2d", "--json")
    assert result.exit_code == 0, result.output
    today = day_label(day_of(wall_clock_ms()))
    yesterday = day_label(day_of(wall_clock_ms() - DAY_MS))
    assert json.loads(result.output)["rows"] == [
        {"day": yesterday, "scopeKey": APP, "inserted": 7},
        {"day": today, "scopeKey": API, "inserted": 1},
        {"day": today, "scopeKey": APP, "inserted": 2}]
    # 1d is today only; the table names the day, the scope and the count.
    table = stats(filled, "lessons", "--since", "1d").output.splitlines()
    assert table[0] == f"UTC days {today} to {today} (the last 1 day):"
    assert table[1].split() == ["day", "scope", "lessons"]
    assert table[2:] == [f"{today}  {API}        1", f"{today}  {APP}        2"]


def test_the_default_reading_covers_the_last_seven_days_and_says_so(filled):
    """A person checking the morning after still sees yesterday's lessons."""
    today = day_of(wall_clock_ms())
    result = stats(filled, "lessons")
    lines = result.output.splitlines()
    assert lines[0] == (f"UTC days {day_label(today - 6)} to {day_label(today)}"
                        " (the last 7 days):")
    assert f"{day_label(today - 1)}  {APP}        7" in lines
    data = json.loads(stats(filled, "--json").output)
    assert data["since"] == day_label(today - 6) and data["until"] == day_label(today)
    assert data["groups"][APP]["inserted"] == 9


def test_the_rejected_share_per_kind_with_its_markers(filled):
    result = stats(filled, "rejected", "--json")
    assert result.exit_code == 0, result.output
    groups = json.loads(result.output)["groups"]
    assert groups["repo"] == {"offered": 5, "rejected": 2, "share": 0.4,
                              "markers": {"commit_sha": 2, "pr_subject": 1}}
    assert groups["org"]["share"] == 0.0
    table = stats(filled, "rejected").output
    assert "40%" in table and "commit_sha 2, pr_subject 1" in table


def test_restated_against_inserted_flags_over_merging(filled):
    result = stats(filled, "restated", "--json")
    groups = json.loads(result.output)["groups"]
    assert groups == {API: {"restated": 3, "inserted": 1, "overMerging": True},
                      APP: {"restated": 0, "inserted": 9, "overMerging": False}}
    lines = stats(filled, "restated").output.splitlines()
    assert [line for line in lines if "review" in line] == [
        f"{API}         3         1  restated > inserted: review"]


def test_every_counter_per_scope_and_one_scope_alone(filled):
    result = stats(filled, "--scope", APP, "--since", "all", "--json")
    assert json.loads(result.output)["groups"] == {APP: {
        "offered": 5, "rejected": 2, "inserted": 9, "summaries": 1,
        "rejected:commit_sha": 2, "rejected:pr_subject": 1}}
    by_kind = json.loads(stats(filled, "--by", "kind", "--json").output)["groups"]
    assert set(by_kind) == {"org", "repo"} and by_kind["repo"]["inserted"] == 10


@pytest.mark.parametrize("args, message", [
    (["--since", "yesterday"], "takes Nd"),
    (["--since", "0d"], "takes 1d"),
    # A day after today read nothing and said "the last -24 days": nothing counted.
    (["--since", "2999-01-01"], "2999-01-01 is after today"),
    (["--scope", "org:a b"], "whitespace"),
    (["--kind", "Repo!"], "scope kind"),
    (["--scope", APP, "--kind", "repo"], "not both"),
    (["bogus"], "Invalid value"),
])
def test_a_bad_option_is_a_usage_error(config, args, message):
    result = stats(config, *args)
    assert result.exit_code == 2 and message in result.output
    assert "Traceback" not in result.output


def test_nothing_counted_yet_says_so(config):
    result = stats(config)
    assert result.exit_code == 0 and result.output.startswith("UTC days ")
    assert result.output.rstrip().endswith("(the last 7 days): nothing counted")
    everything = stats(config, "--since", "all").output
    assert everything.startswith("every UTC day kept, to ")


def test_memory_off_says_nothing_is_counted(tmp_path):
    path = tmp_path / "off.toml"
    path.write_text('[memory]\nenabled = false\n')
    result = stats(path, "--json")
    assert result.exit_code == 1
    assert json.loads(result.output)["counting"] is False
    assert "memory is off" in stats(path).output
