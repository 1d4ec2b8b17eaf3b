"""Replays answered from memory: a request carrying an ``Idempotency-Key`` the worker has
answered (2xx) within ``REPLAY_SECONDS`` gets that first answer again, and the store is not
called. The client (``stores.worker``) makes one key per call that changes something and
reuses it across that call's retries, so a write whose answer was lost (a dropped
connection, a timeout) is not applied twice: dedup would bump a use count twice, a restated
record would be strengthened twice.

A key is remembered per route and per worker *process*, in a bounded
LRU (``MAX_KEYS`` keys and ``MAX_BYTES`` of answers, ``REPLAY_SECONDS`` each); nothing is
stored in the store. With
``scopemem serve --workers N`` the processes share the port, and a retry may reach another
process than the first attempt: that process has not seen the key and applies the write
(the same as a client without keys). A retry on the same keep-alive connection stays in the
same process; one after a dropped connection may not. A retry that arrives while the first
attempt is still running waits for its answer instead of running again. A refusal (4xx) or
a failure (5xx) is not remembered: the retry runs anew.

A key names one request: the answer is remembered with a digest of the body it answered,
and a request repeating the key with another body is refused (400) rather than told that
the first body's write was its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

import attrs
from aiohttp import web

from scopemem.worker_aiohttp.handling import (
    UNREAD,
    error_answer,
    is_data_route,
    read_raw,
    unread_answer,
)

HEADER = "Idempotency-Key"
#: What a key may be: the client sends 32 hex digits; anything header-safe up to 128.
KEY_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
_KEY = re.compile(KEY_PATTERN)
REPLAY_SECONDS = 600.0
MAX_KEYS = 10_000
#: The most bytes of answers remembered at once (the oldest forgotten first).
MAX_BYTES = 32 * 1024 * 1024


@attrs.frozen
class Answer:
    status: int
    body: bytes
    content_type: str
    #: The SHA-256 of the request body this answered: a replay must send the same.
    digest: bytes


@attrs.define
class _Entry:
    at: float
    future: asyncio.Future[Answer]
    #: The bytes of its answer once given (0 while the first attempt runs).
    size: int = 0


class Replays:
    """The answers this process gave to keyed requests lately: bounded in number, in bytes
    (an answer can be a page of records: 10,000 of them would not fit in memory) and in
    age. An answer larger than the bound in bytes is not remembered."""

    def __init__(self, seconds: float = REPLAY_SECONDS, most: int = MAX_KEYS,
                 clock: Callable[[], float] = time.monotonic,
                 most_bytes: int = MAX_BYTES) -> None:
        self.seconds = seconds
        self.most = most
        self.most_bytes = most_bytes
        self._clock = clock
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        """The bytes of the answers remembered."""
        return self._bytes

    def find(self, key: tuple[str, str]) -> asyncio.Future[Answer] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self._clock() - entry.at > self.seconds:
            self._forget(key)
            return None
        self._entries.move_to_end(key)
        return entry.future

    def start(self, key: tuple[str, str]) -> asyncio.Future[Answer]:
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        if key in self._entries:
            self._forget(key)
        self._entries[key] = _Entry(self._clock(), future)
        self._trim()
        return future

    def answered(self, key: tuple[str, str], future: asyncio.Future[Answer],
                 answer: Answer) -> None:
        """Give ``answer`` to ``future`` (and whoever waits on it), and keep it for a
        replay when it fits."""
        future.set_result(answer)
        entry = self._entries.get(key)
        if entry is None or entry.future is not future:
            return
        if len(answer.body) > self.most_bytes:
            self._forget(key)
            return
        entry.size = len(answer.body)
        self._bytes += entry.size
        self._trim()

    def drop(self, key: tuple[str, str], future: asyncio.Future[Answer]) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry.future is future:
            self._forget(key)

    def _forget(self, key: tuple[str, str]) -> None:
        self._bytes -= self._entries.pop(key).size

    def _trim(self) -> None:
        """Forget the oldest until both bounds hold."""
        while len(self._entries) > self.most or self._bytes > self.most_bytes:
            _key, entry = self._entries.popitem(last=False)
            self._bytes -= entry.size


REPLAYS = web.AppKey("scopemem_worker_replays", Replays)


@web.middleware
async def idempotent(request: web.Request,
                     handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                     ) -> web.StreamResponse:
    """Answer a keyed data request once; a replay of its key gets the first answer."""
    key = request.headers.get(HEADER)
    if key is None or not is_data_route(request):
        return await handler(request)
    if not _KEY.match(key):
        return error_answer(400, f"{HEADER} must be 1 to 128 letters, digits or _.:-")
    replays = request.app[REPLAYS]
    slot = (request.path, key)
    earlier = replays.find(slot)
    if earlier is not None:
        try:
            digest = hashlib.sha256(await read_raw(request)).digest()
        except UNREAD as exc:
            return unread_answer(request, exc)
        try:
            answer = await asyncio.shield(earlier)
        except _NotRemembered:
            return await handler(request)  # the first attempt failed: this one runs anew
        if answer.digest != digest:
            return error_answer(400, f"this {HEADER} was sent with another body: a new"
                                     " request needs a new key")
        return web.Response(status=answer.status, body=answer.body,
                            content_type=answer.content_type)
    future = replays.start(slot)
    try:
        response = await handler(request)
        # A 2xx answer read the whole body (every data route reads it first): cached.
        digest = (hashlib.sha256(await request.read()).digest()
                  if 200 <= response.status < 300 else b"")
    except BaseException:
        replays.drop(slot, future)
        future.set_exception(_NotRemembered())
        future.exception()  # retrieved: nobody need be waiting
        raise
    if 200 <= response.status < 300 and isinstance(response, web.Response) \
            and isinstance(response.body, bytes):
        replays.answered(slot, future, Answer(response.status, response.body,
                                              response.content_type, digest))
    else:
        replays.drop(slot, future)
        future.set_exception(_NotRemembered())
        future.exception()
    return response


class _NotRemembered(Exception):
    """The first attempt of a key gave no answer worth replaying."""
