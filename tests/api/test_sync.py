"""``SyncMemory`` from plain synchronous code: the same operations, blocking, from any thread,
on a real SQLite directory; and closing cleanly."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

from scopemem import (
    Caller,
    MemoryRefused,
    Request,
    Run,
    ScopememError,
    SyncMemory,
    handle_command,
    hookimpl,
)
from scopemem.plugins.manager import new_plugin_manager

ADMIN = "user:slack:UADMIN"
ALICE = Caller(user_key="user:slack:UA", channel_id="slack:C1")
BOB = Caller(user_key="user:slack:UB", channel_id="slack:C1")


def config(tmp_path: Path) -> dict[str, object]:
    return {"memory": {"enabled": True, "organization": "acme", "store": "sqlite",
                       "admins": [ADMIN],
                       "stores": {"sqlite": {"path": str(tmp_path / "data")}}}}


def test_the_operations_block_and_answer_like_memory(tmp_path: Path):
    with SyncMemory.from_config(config(tmp_path)) as memory:
        remembered = memory.remember(ALICE, "the api tests need make bootstrap first")
        assert remembered.scope_key == ALICE.user_key and remembered.outcome == "inserted"
        [record] = memory.list(ALICE, "me").records
        assert record.text == "the api tests need make bootstrap first"
        assert memory.search(ALICE, "bootstrap tests").records == (record,)
        assert [r.id for r in memory.export(ALICE, "me")] == [record.id]
        with pytest.raises(MemoryRefused) as refused:
            memory.list(ALICE, BOB.user_key)
        assert refused.value.reason == "closed_scope"
        # The gate's questions, asked without reading, as Memory answers them.
        assert memory.read_refusal(BOB.user_key, ALICE) == refused.value.message
        assert memory.read_refusal("org:acme", ALICE) is None
        assert not memory.is_admin(ALICE) and memory.is_admin(Caller(user_key=ADMIN))
        request = Request(text="hi", user_id="slack:UA", channel_id="slack:C1")
        assert memory.scope_keys(request) == memory.memory.scope_keys(request)
        assert ALICE.user_key in memory.scope_keys(request)
        block = memory.context_block(Request(text="how do I run the api tests",
                                             user_id="slack:UA"))
        assert "make bootstrap" in block
        assert memory.forget(ALICE, record.id).forgotten
        assert memory.list(ALICE, "me").records == ()
        # What the class does not wrap runs on its loop through ``run``.
        reply = memory.run(handle_command(memory.memory, "memory list me", ALICE.user_key))
        assert reply is not None and "no active records" in reply
    # Written to the files: a new SyncMemory on the same directory sees it.
    with SyncMemory.from_config(config(tmp_path)) as again:
        assert [r.status.value for r in again.export(ALICE, "me")] == ["forgotten"]


def test_two_threads_share_one_sync_memory(tmp_path: Path):
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    with SyncMemory.from_config(config(tmp_path)) as memory:
        def work(caller: Caller) -> None:
            try:
                start.wait()
                for n in range(10):
                    memory.remember(caller, f"fact {n} of {caller.user_key.rsplit(':', 1)[1]}")
                    memory.list(caller, "me")
            except BaseException as exc:  # surfaced below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(caller,)) for caller in (ALICE, BOB)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        for caller, name in ((ALICE, "UA"), (BOB, "UB")):
            texts = {r.text for r in memory.list(caller, "me", limit=50).records}
            assert texts == {f"fact {n} of {name}" for n in range(10)}


def test_a_closed_sync_memory_refuses_calls_and_closes_once(tmp_path: Path):
    memory = SyncMemory.from_config(config(tmp_path))
    memory.close()
    memory.close()
    with pytest.raises(ScopememError, match="closed"):
        memory.list(ALICE)
    assert not memory._thread.is_alive()


def test_a_call_from_its_own_loop_is_an_error_not_a_hang(tmp_path: Path):
    with SyncMemory.from_config(config(tmp_path)) as memory:
        async def inside() -> None:
            memory.list(ALICE)

        with pytest.raises(ScopememError, match="its own loop"):
            memory.run(inside())


def test_a_config_error_stops_the_loop_thread(tmp_path: Path):
    before = threading.active_count()
    with pytest.raises(ScopememError):
        SyncMemory.from_config({"memory": {"enabled": True}})  # no organization
    assert threading.active_count() == before


class Lesson:
    """A reflection model that answers one durable fact."""

    @hookimpl
    def scopemem_register_providers(self, register):
        register("lesson", lambda settings: self)

    async def complete(self, *, model, system, user, max_tokens=1024):
        return json.dumps({"facts": [{"text": "deploys freeze on fridays", "confidence": 0.9}]})

    async def close(self):
        pass


def test_a_run_in_its_slot_keeps_close_waiting_for_its_reflection(tmp_path: Path):
    """As ``Memory.run_slot``: a bot thread between its reply and scheduling its reflection
    holds ``close`` (another thread's shutdown) until the reflection is scheduled and done;
    without a slot, close finished first and the run was refused as closed."""
    settings = config(tmp_path)
    settings["memory"]["model"] = "lesson/m"  # type: ignore[index]
    pm = new_plugin_manager(environ={"SCOPEMEM_LOAD_PLUGINS": ""}, extra_plugins=(Lesson(),))
    memory = SyncMemory.from_config(settings, plugin_manager=pm)
    assert memory.store_is_durable
    draining, entered = threading.Event(), threading.Event()
    drain = memory.memory.drain

    async def noted(timeout: float = 900.0) -> bool:
        draining.set()
        return await drain(timeout)

    memory.memory.drain = noted  # type: ignore[method-assign]
    request = Request(text="can I deploy on friday?", user_id="slack:UA", channel_id="slack:C1",
                      channel_visibility="public")
    errors: list[BaseException] = []

    def bot() -> None:
        try:
            with memory.run_slot():
                entered.set()
                draining.wait()  # the shutdown has begun: the reply is being sent
                memory.schedule_reflection(Run(request=request, history=[], answer="no",
                                               tool_calls=1, run_id="r-1"))
        except BaseException as exc:  # surfaced below, in the test's thread
            errors.append(exc)
            entered.set()

    thread = threading.Thread(target=bot)
    thread.start()
    entered.wait()
    memory.close()
    thread.join()
    assert errors == []
    with SyncMemory.from_config(config(tmp_path)) as again:
        assert [r.text for r in again.list(ALICE, "org").records] == [
            "deploys freeze on fridays"]


def test_a_preview_counts_nothing_as_it_does_on_memory(tmp_path: Path):
    """``Memory.context(request, count=False)`` is the documented preview; SyncMemory's
    ``context`` took no ``count``, so a blocking caller could only preview by counting."""
    with SyncMemory.from_config(config(tmp_path)) as memory:
        memory.remember(ALICE, "deploys freeze on fridays")
        request = Request(text="can I deploy on friday", user_id="slack:UA")
        preview = memory.context(request, count=False)
        assert "deploys freeze on fridays" in preview.block
        memory.drain(5)
        [record] = memory.list(ALICE, "me").records
        assert record.use_count == 0
        assert memory.context(request).block == preview.block
        memory.drain(5)
        assert memory.list(ALICE, "me").records[0].use_count == 1


def test_each_method_takes_what_memorys_takes():
    """``SyncMemory`` is ``Memory``'s API, blocking: the same parameters, so a type checker
    catches a misspelt keyword (``remember(…, thred_key=…)`` passed ``**options: Any``)
    and a documented one is there (``context(request, count=False)`` was missing)."""
    import inspect

    from scopemem import Memory

    def shape(function) -> list[tuple[str, object, object]]:
        return [(p.name, p.kind, p.default)
                for p in inspect.signature(function).parameters.values()]

    shared = [name for name in vars(SyncMemory) if not name.startswith("_")
              and callable(getattr(Memory, name, None)) and name not in ("drain", "close")]
    assert "remember" in shared and "from_config" in shared and "context" in shared
    for name in shared:
        assert shape(getattr(SyncMemory, name)) == shape(getattr(Memory, name)), name


def test_close_lets_a_call_in_flight_finish_and_refuses_later_ones_by_name(tmp_path: Path):
    """A bot thread's ``remember`` was cancelled under it when another thread closed: it
    raised a bare ``CancelledError`` (no message), its fact unwritten, after the store was
    closed beneath the write. ``close`` now waits for the calls in flight (within its
    drain timeout) before closing the memory; a call after it is ``ScopememError``."""
    memory = SyncMemory.from_config(config(tmp_path))
    writing, outcome = threading.Event(), []
    write = memory.memory.store.write

    async def slow(scope_key, candidates, *args, **kwargs):  # type: ignore[no-untyped-def]
        writing.set()
        await asyncio.sleep(0.5)
        return await write(scope_key, candidates, *args, **kwargs)

    memory.memory.store.write = slow  # type: ignore[method-assign]

    def bot() -> None:
        try:
            outcome.append(memory.remember(ALICE, "deploys freeze on fridays").outcome)
            memory.remember(ALICE, "the api tests need make bootstrap first")
        except BaseException as exc:  # surfaced below, in the test's thread
            outcome.append(exc)

    thread = threading.Thread(target=bot)
    thread.start()
    writing.wait()
    memory.close()
    thread.join()
    assert outcome[0] == "inserted"
    assert isinstance(outcome[1], ScopememError) and "closed" in str(outcome[1])
    with SyncMemory.from_config(config(tmp_path)) as again:
        assert [r.text for r in again.list(ALICE, "me").records] == [
            "deploys freeze on fridays"]
