"""The auth gate and the length fence, over raw sockets to a real listening server.

An HTTP client library will not send most of these requests, so they are written by hand.
Each refused request carries a body that is not JSON: had the server parsed it, the answer
would have been 400. The store spy and a counter on the body parser prove nothing was read.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from yarl import URL

from scopemem.worker_aiohttp import validation
from scopemem.worker_aiohttp.app import create_app, running
from tests.worker.conftest import ORG, TOKEN, raw_exchange, read_to_close

AUTH_LINE = f"Authorization: Bearer {TOKEN}\r\n".encode()
NOT_JSON = b"this is not json at all"


@pytest.fixture
def parsed(monkeypatch) -> list[bytes]:
    """Every body the worker's handlers handed to the JSON parser."""
    seen: list[bytes] = []
    original = validation.parse_body

    def counting(raw: bytes):
        seen.append(raw)
        return original(raw)

    monkeypatch.setattr(validation, "parse_body", counting)
    return seen


@pytest.fixture
async def port(spy):
    async with running(create_app(spy, TOKEN)) as url:
        yield URL(url).port


def request(headers: bytes, body: bytes = b"", *, path: bytes = b"/list",
            auth: bool = True) -> bytes:
    return (b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + (AUTH_LINE if auth else b"") + headers + b"\r\n" + body)


async def test_a_well_formed_request_gets_through(port, spy, parsed):
    body = json.dumps({"scopeKey": ORG, "limit": 3}).encode()
    status, answer = await raw_exchange(
        port, request(b"Content-Length: %d\r\n" % len(body), body))
    assert status == 200 and json.loads(answer) == {"records": []}
    assert len(spy.calls) == 1 and parsed == [body]


# Requests whose headers reach the application: it checks the token first.
UNSIZED = {
    "absent": (b"", b""),  # without a length there is no body: any bytes would be a new request
    "chunked": (b"Transfer-Encoding: chunked\r\n", b"17\r\n" + NOT_JSON + b"\r\n0\r\n\r\n"),
    "chunked-never-ending": (b"Transfer-Encoding: chunked\r\n", b"ffff\r\n" + NOT_JSON),
}
# Requests aiohttp's HTTP parser refuses while reading the headers, before the application
# (and so the token check) sees them: 411 for everyone.
MALFORMED = {
    "hex": (b"Content-Length: 0x10\r\n", NOT_JSON),
    "exponent": (b"Content-Length: 5e2\r\n", NOT_JSON),
    "plus": (b"Content-Length: +5\r\n", NOT_JSON),
    "decimal": (b"Content-Length: 12.5\r\n", NOT_JSON),
    "arabic-indic": ("Content-Length: \u0665\r\n".encode(), NOT_JSON),
    "blank": (b"Content-Length: \r\n", NOT_JSON),
    "negative": (b"Content-Length: -5\r\n", NOT_JSON),
    "inner-space": (b"Content-Length: 1 2\r\n", NOT_JSON),
    "list": (b"Content-Length: 23, 23\r\n", NOT_JSON),
    "duplicated": (b"Content-Length: 23\r\nContent-Length: 23\r\n", NOT_JSON),
    "with-transfer-encoding": (b"Content-Length: 23\r\nTransfer-Encoding: chunked\r\n",
                               b"17\r\n" + NOT_JSON + b"\r\n0\r\n\r\n"),
}
AUTH_CASES = pytest.mark.parametrize("auth", [True, False], ids=["authed", "anonymous"])


@pytest.mark.parametrize("case", list(UNSIZED))
@AUTH_CASES
async def test_unsized_bodies_are_411_unread_and_anonymous_ones_401(port, spy, parsed, case,
                                                                    auth):
    headers, body = UNSIZED[case]
    status, answer = await raw_exchange(port, request(headers, body, auth=auth))
    assert status == (411 if auth else 401), answer
    assert "error" in json.loads(answer)
    assert spy.calls == [] and parsed == []


@pytest.mark.parametrize("case", list(MALFORMED))
@AUTH_CASES
async def test_malformed_lengths_are_411_unread_for_everyone(port, spy, parsed, case, auth):
    headers, body = MALFORMED[case]
    status, answer = await raw_exchange(port, request(headers, body, auth=auth))
    assert status == 411, answer
    assert "error" in json.loads(answer)
    assert spy.calls == [] and parsed == []


@pytest.mark.parametrize(("length", "anonymous"), [
    (b"524289", 401), (b"600000", 401), (b"99999999999", 401),
    (b"99999999999999999999999999", 413),  # too many digits for the parser itself
])
@AUTH_CASES
async def test_over_the_limit_is_413_without_waiting_for_the_body(port, spy, parsed, length,
                                                                  anonymous, auth):
    # The declared body is never sent: an answer at all proves the server did not wait for it.
    status, answer = await raw_exchange(port, request(b"Content-Length: " + length + b"\r\n",
                                                      b"{", auth=auth), timeout=3)
    assert status == (413 if auth else anonymous)
    assert "error" in json.loads(answer)
    assert spy.calls == [] and parsed == []


async def test_exactly_the_limit_is_read(port, parsed):
    limit = 512 * 1024
    empty = json.dumps({"scopeKey": ORG, "limit": 1, "pad": ""}).encode()
    body = json.dumps({"scopeKey": ORG, "limit": 1, "pad": "x" * (limit - len(empty))}).encode()
    assert len(body) == limit
    status, _ = await raw_exchange(port, request(b"Content-Length: 524288\r\n", body))
    assert status == 200 and len(parsed) == 1


@AUTH_CASES
async def test_a_compressed_body_is_415_unread(port, spy, parsed, auth):
    status, _ = await raw_exchange(port, request(
        b"Content-Encoding: gzip\r\nContent-Length: 23\r\n", NOT_JSON, auth=auth))
    assert status == (415 if auth else 401) and spy.calls == [] and parsed == []


async def test_the_token_is_checked_before_the_fence(port, spy):
    # Without a token every request the application sees is 401, whatever its length says.
    for headers, body in [(b"", b""), (b"Content-Length: 600000\r\n", b"{"),
                          (b"Content-Length: 2\r\n", b"{}")]:
        status, _ = await raw_exchange(port, request(headers, body, auth=False))
        assert status == 401
    # With it, the fence has its say.
    status, _ = await raw_exchange(port, request(b""))
    assert status == 411
    assert spy.calls == []


async def test_the_connection_is_closed_after_a_refused_body(port):
    data = await read_to_close(port, request(b"Content-Length: 600000\r\n", b"{\"scopeKey\": "))
    assert data.startswith(b"HTTP/1.1 413")


# --- the token before the fence ------------------------------------------------------------------


async def test_an_anonymous_oversized_request_is_401_and_its_body_never_parsed(port, spy,
                                                                               parsed):
    data = await read_to_close(port, request(b"Content-Length: 600000\r\n", b'{"scopeKey": ',
                                             auth=False))
    assert data.startswith(b"HTTP/1.1 401") and b"WWW-Authenticate: Bearer" in data
    assert spy.calls == [] and parsed == []


async def test_an_anonymous_oversized_expect_continue_is_401_before_the_body_is_sent(
        port, spy, parsed):
    data = await read_to_close(port, request(
        b"Content-Length: 600000\r\nExpect: 100-continue\r\n", auth=False))
    assert data.startswith(b"HTTP/1.1 401") and b"100 Continue" not in data
    assert spy.calls == [] and parsed == []


async def test_bytes_after_an_anonymous_unsized_request_are_never_a_second_request(port, spy):
    # Without a length the bytes that follow would be read as the next request: the refusal
    # closes the connection instead, so the authorized request hidden there never runs.
    body = json.dumps({"scopeKey": ORG, "limit": 1}).encode()
    # It asks for the connection to close after it, so a server that did run it would answer
    # it and close: both answers would be read here.
    hidden = request(b"Connection: close\r\nContent-Length: %d\r\n" % len(body), body)
    data = await read_to_close(port, request(b"", hidden, auth=False))
    assert data.startswith(b"HTTP/1.1 401") and data.count(b"HTTP/1.1 ") == 1
    assert spy.calls == []


# --- auth on the wire ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [
    "Bearer s3cret-tok\u00e9n".encode(),          # UTF-8 bytes
    b"Bearer s3cret-tok\xe9n",                     # a latin-1 byte
    b"Bearer \xff\xfe",                            # not decodable at all
    "B\u00e9arer ".encode() + TOKEN.encode(),      # non-ASCII scheme
    b"Bearer  " + TOKEN.encode() + b"\xc2\xa0",    # a no-break space after the token
], ids=["utf8", "latin1", "undecodable", "scheme", "nbsp"])
async def test_non_ascii_authorization_is_401_never_500(port, spy, value):
    body = json.dumps({"scopeKey": ORG, "limit": 1}).encode()
    raw = (b"POST /list HTTP/1.1\r\nHost: x\r\nAuthorization: " + value
           + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    status, answer = await raw_exchange(port, raw)
    assert status == 401
    assert "error" in json.loads(answer)
    assert spy.calls == []


async def test_a_control_character_in_a_header_is_refused_by_the_parser_not_500(port, spy):
    raw = (b"POST /list HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\x01b\r\n"
           b"Content-Length: 2\r\n\r\n{}")
    status, _ = await raw_exchange(port, raw)
    assert status == 400 and spy.calls == []


# --- Expect: 100-continue ------------------------------------------------------------------------


async def head_of(port: int, raw: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter,
                                                   bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    return reader, writer, await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)


async def test_expect_continue_is_refused_before_the_body_is_sent(port, spy, parsed):
    for headers, auth, expected in [
        (b"Content-Length: 600000\r\n", True, b"HTTP/1.1 413"),
        (b"Content-Length: 20\r\n", False, b"HTTP/1.1 401"),
        (b"", True, b"HTTP/1.1 411"),
        (b"", False, b"HTTP/1.1 401"),
        (b"Content-Length: 600000\r\n", False, b"HTTP/1.1 401"),
    ]:
        reader, writer, head = await head_of(
            port, request(headers + b"Expect: 100-continue\r\n", auth=auth))
        assert head.startswith(expected), head
        writer.close()
    assert spy.calls == [] and parsed == []


async def test_expect_continue_then_the_body(port, spy):
    body = json.dumps({"scopeKey": ORG, "limit": 2}).encode()
    reader, writer, head = await head_of(port, request(
        b"Expect: 100-continue\r\nContent-Length: %d\r\n" % len(body)))
    assert head.startswith(b"HTTP/1.1 100")
    writer.write(body)
    await writer.drain()
    final = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert final.startswith(b"HTTP/1.1 200")
    writer.close()
    assert len(spy.calls) == 1
