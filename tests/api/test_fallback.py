"""``memory.fallback``: a bot whose worker token is missing stands in with the in-process
store and one warning (the default), and its write results say they die with the process;
``"refuse"`` makes a missing token or a worker that does not answer an error at startup."""

from __future__ import annotations

import asyncio

import pytest

from scopemem import Caller, Memory
from scopemem.errors import ConfigError, StoreError
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.worker import WorkerStore
from scopemem.worker_aiohttp.app import create_app, running

ALICE = Caller(user_key="user:slack:UA", channel_id="slack:C1")
TOKEN = "fallback-token"


def config(url: str, **memory: object) -> dict[str, object]:
    return {"memory": {"enabled": True, "organization": "acme", "store": "worker",
                       "stores": {"worker": {"base_url": url, "token_env": "FALLBACK_TOKEN",
                                             "timeout_seconds": 2}},
                       **memory}}


@pytest.fixture
def closed_url(refused_port: int) -> str:
    return f"http://127.0.0.1:{refused_port}"


async def test_the_default_falls_back_and_its_results_say_they_are_not_durable(
        memory_warnings, closed_url):
    memory = Memory.from_config(config(closed_url), environ={})
    try:
        assert isinstance(memory.store, InMemoryStore) and not memory.store_is_durable
        result = await memory.remember(ALICE, "run make bootstrap before the tests")
        assert result.outcome == "inserted" and result.durable is False
        forgotten = await memory.forget(ALICE, f"mem:{ALICE.user_key}:1")
        assert forgotten.forgotten and forgotten.durable is False
        [warning] = memory_warnings()
        assert "lost on restart" in warning
    finally:
        await memory.close()


def test_refuse_makes_a_missing_token_an_error_naming_the_key(closed_url):
    with pytest.raises(ConfigError, match=r'memory\.fallback = "refuse": .*FALLBACK_TOKEN'):
        Memory.from_config(config(closed_url, fallback="refuse"), environ={})


def test_refuse_makes_a_worker_that_does_not_answer_an_error_at_startup(closed_url):
    with pytest.raises(StoreError, match=r'memory\.fallback = "refuse": .*not reachable'):
        Memory.from_config(config(closed_url, fallback="refuse"),
                           environ={"FALLBACK_TOKEN": TOKEN})


def test_an_unknown_fallback_is_refused(closed_url):
    with pytest.raises(ConfigError, match=r"memory\.fallback: must be one of"):
        Memory.from_config(config(closed_url, fallback="lose"), environ={})


async def test_refuse_starts_against_a_live_worker_and_writes_are_durable():
    async with running(create_app(InMemoryStore(), TOKEN)) as url:
        memory = await asyncio.to_thread(
            Memory.from_config, config(url, fallback="refuse"),
            environ={"FALLBACK_TOKEN": TOKEN})
        try:
            assert isinstance(memory.store, WorkerStore) and memory.store_is_durable
            result = await memory.remember(ALICE, "pin the node version in CI")
            assert result.outcome == "inserted" and result.durable is True
        finally:
            await memory.close()
