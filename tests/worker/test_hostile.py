"""A worker under hostile clients, over raw sockets to a real listening server: slow and idle
connections are closed, too many connections displace the idle ones, the parser's refusals
are JSON, a client gone mid-body costs one log line, and a store out of descriptors is 503."""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp
import pytest
from yarl import URL

from scopemem.errors import StoreBusy
from scopemem.worker_aiohttp.app import Limits, create_app, running
from scopemem.worker_aiohttp.logs import RepeatLimit
from tests.worker.conftest import ORG, TOKEN, raw_exchange, read_to_close
from tests.worker.test_observe import scrape, total

AUTH_LINE = f"Authorization: Bearer {TOKEN}\r\n".encode()


def post(path: bytes, body: bytes, headers: bytes = b"") -> bytes:
    return (b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + AUTH_LINE + headers
            + b"Content-Length: %d\r\n\r\n" % len(body) + body)


LIST = json.dumps({"scopeKey": ORG, "limit": 3}).encode()


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """What the server sent before closing the connection, or a timeout error."""
    return await asyncio.wait_for(reader.read(), seconds)


@pytest.fixture
async def quick(spy):
    """A worker with deadlines short enough to watch and room for four connections."""
    limits = Limits(idle_timeout=0.3, body_timeout=0.3, max_connections=4)
    async with running(create_app(spy, TOKEN), limits=limits) as url:
        yield URL(url).port


async def test_a_header_dribbled_a_byte_at_a_time_is_cut_off_at_the_deadline(quick):
    reader, writer = await asyncio.open_connection("127.0.0.1", quick)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        closed = False
        for byte in b"POST /list HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100:
            try:
                writer.write(bytes([byte]))
                await writer.drain()
            except ConnectionError:
                closed = True
                break
            await asyncio.sleep(0.02)
            if reader.at_eof():
                closed = True
                break
        if not closed:
            await closed_within(reader, 2)
        # Closed by the header deadline, long before the dribble would have finished.
        assert loop.time() - started < 2.0
    finally:
        writer.close()


async def test_an_idle_connection_is_closed_after_seconds_not_an_hour(quick):
    reader, writer = await asyncio.open_connection("127.0.0.1", quick)
    try:
        assert await closed_within(reader, 3) == b""
    finally:
        writer.close()


async def test_a_body_that_never_finishes_is_408_and_closed(quick, spy):
    answer = await read_to_close(quick, b"POST /list HTTP/1.1\r\nHost: x\r\n" + AUTH_LINE
                                 + b"Content-Length: 100\r\n\r\n{\"scopeKey\"", 3)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    assert json.loads(body) == {"error": "the body did not arrive in time"}
    assert spy.calls == []
    async with aiohttp.ClientSession() as session:  # an operator sees it as what it was
        _, samples = await scrape(session, f"http://127.0.0.1:{quick}")
    assert total(samples, "scopemem_worker_requests_total", route="/list", status="408") == 1


async def test_excess_idle_connections_give_way_to_a_real_client(quick, spy):
    idle = [await asyncio.open_connection("127.0.0.1", quick) for _ in range(6)]
    try:
        # Far more than the limit are open or opening; a real request is still answered.
        status, answer = await raw_exchange(quick, post(b"/list", LIST))
        assert status == 200 and json.loads(answer) == {"records": []}
        # The oldest idle ones were closed to make room.
        first_reader = idle[0][0]
        assert await closed_within(first_reader, 2) == b""
    finally:
        for _reader, writer in idle:
            writer.close()


async def test_when_every_connection_is_busy_a_newcomer_gets_a_fixed_503(spy):
    spy.hold = asyncio.Event()
    limits = Limits(max_connections=2)
    async with running(create_app(spy, TOKEN), limits=limits, shutdown_timeout=2) as url:
        port = URL(url).port
        held = []
        try:
            for _ in range(2):  # two requests the store holds: both connections are busy
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(post(b"/list", LIST))
                await writer.drain()
                held.append((reader, writer))
            while len(spy.calls) < 2:
                await asyncio.sleep(0.01)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            answer = await closed_within(reader, 2)
            writer.close()
        finally:
            spy.hold.set()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in head
        assert json.loads(body)["error"].startswith("busy")
        # The busy connections were served all the same.
        for held_reader, held_writer in held:
            head = await asyncio.wait_for(held_reader.readuntil(b"\r\n\r\n"), 2)
            assert head.startswith(b"HTTP/1.1 200")
            held_writer.close()


@pytest.mark.parametrize("raw", [
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\x01: y\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40,  # a TLS hello
    b"GET /healthz HTTP/9.9\r\n\r\n",
])
async def test_the_parsers_refusals_are_json_and_never_echo_the_request(quick, raw, caplog):
    answer = await read_to_close(quick, raw, 3)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b" 400 " in head.split(b"\r\n")[0] or b" 505 " in head.split(b"\r\n")[0]
    assert b"application/json" in head and b"Server: scopemem" in head
    assert "error" in json.loads(body)
    assert b"Bad Header" not in body and b"healthz" not in body
    assert not [r for r in caplog.records if r.exc_info]


async def test_a_post_without_length_whose_body_follows_at_once_is_411(quick, spy):
    raw = (b"POST /list HTTP/1.1\r\nHost: x\r\n" + AUTH_LINE + b"\r\n" + LIST)
    answer = await read_to_close(quick, raw, 3)
    assert answer.startswith(b"HTTP/1.1 411") or answer.startswith(b"HTTP/1.0 411")
    assert spy.calls == []


async def test_a_doubled_content_encoding_is_415_not_500(quick, spy):
    raw = post(b"/list", b"\x1f\x8bcorrupt",
               b"Content-Encoding: identity\r\nContent-Encoding: gzip\r\n")
    status, answer = await raw_exchange(quick, raw)
    assert status == 415 and "Content-Encoding" in json.loads(answer)["error"]
    assert spy.calls == []


async def test_a_client_gone_mid_body_logs_one_line_without_a_traceback(quick, spy, caplog):
    caplog.set_level(logging.INFO)
    reader, writer = await asyncio.open_connection("127.0.0.1", quick)
    writer.write(b"POST /write HTTP/1.1\r\nHost: x\r\n" + AUTH_LINE
                 + b"Content-Length: 1000\r\n\r\n{\"scopeKey\"")
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.close()
    await asyncio.sleep(0.2)
    status, _answer = await raw_exchange(quick, post(b"/list", LIST))
    assert status == 200
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert len(spy.calls) == 1  # the /list; the body cut short never reached the store


async def test_a_store_out_of_descriptors_answers_503_busy(spy):
    spy.fail = StoreBusy("no file descriptor left")
    async with running(create_app(spy, TOKEN)) as url:
        status, answer = await raw_exchange(URL(url).port, post(b"/list", LIST))
    assert status == 503 and json.loads(answer)["error"].startswith("busy")


async def test_a_store_that_cannot_reach_its_database_answers_503_saying_so(spy):
    """Not "busy": a client (or its operator) reading the answer is told the database is out
    of reach, and still retries (503, Retry-After)."""
    from scopemem.errors import StoreUnreachable

    spy.fail = StoreUnreachable("postgres store: cannot connect to the server: refused")
    async with running(create_app(spy, TOKEN)) as url:
        status, answer = await raw_exchange(URL(url).port, post(b"/list", LIST))
    assert status == 503
    assert json.loads(answer)["error"] == ("unavailable: the store cannot reach its database"
                                           " now, retry shortly")


def test_repeated_identical_errors_are_logged_a_few_times_a_minute():
    now = [0.0]
    limit = RepeatLimit(burst=3, window=60, clock=lambda: now[0])

    def record(msg: str, level: int = logging.ERROR) -> logging.LogRecord:
        return logging.LogRecord("scopemem.worker", level, __file__, 1, msg, (), None)

    passed = [limit.filter(record("accept failed: %s")) for _ in range(1000)]
    assert passed.count(True) == 3
    assert limit.filter(record("another error"))  # a different message is never held back
    assert all(limit.filter(record("info line", logging.INFO)) for _ in range(10))
    now[0] = 61.0
    again = record("accept failed: %s")
    assert limit.filter(again) and "997 more like this left out" in again.getMessage()


@pytest.mark.parametrize(("opening", "closing"), [(b"[", b"]"), (b'{"\\u00e9":', b"}")])
def test_a_body_as_deep_as_the_decoder_takes_is_refused_never_a_recursion_error(
        opening, closing):
    """At every depth the JSON decoder takes, the walk for lone surrogates goes to the
    bottom without recursing: a body a few levels short of the decoder's limit was a 500
    and a traceback (``RecursionError``) where one level deeper was a 400."""
    from scopemem.worker_aiohttp.validation import BodyError, parse_body

    for depth in range(1, 1100):
        raw = b'{"scopeKey":"org:acme","x":' + opening * depth + b'"\\ud800"' \
            + closing * depth + b"}"
        with pytest.raises(BodyError, match="lone surrogate|nested too deeply"):
            parse_body(raw)
    assert parse_body(b'{"x":' + b"[" * 500 + b"]" * 500 + b"}")["x"]  # deep and fine
