"""Who may enter the hub: the hub token exchanged for a signed session cookie, CSRF tokens
tied to the session, and a limit on failed logins.

The session lives in the cookie, signed with a key derived from the hub token, so every
worker process of ``scopemem serve --workers N`` accepts the sessions any of them issued,
and changing the token ends every session at once. Logging out clears the cookie and
refuses its session in the process that answered; the session expires everywhere after
``SESSION_MS`` regardless.

Every state-changing request carries a CSRF token: the session's own, an HMAC of its id, so
nothing has to be stored. The login form, sent before there is a session, carries a random
value that must also be in a short-lived cookie (a double submit), so another site cannot
log a browser in with its own token.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import secrets
from collections.abc import Callable

import attrs

Clock = Callable[[], int]

SESSION_COOKIE = "scopemem_hub"
LOGIN_COOKIE = "scopemem_hub_login"
#: How long a session lasts from its login (8 hours), in milliseconds.
SESSION_MS = 8 * 60 * 60 * 1000
#: Failed logins allowed per client address within ``FAILURE_WINDOW_MS``, and in total
#: (every address together: a guesser with many addresses is slowed too).
MAX_FAILURES_PER_CLIENT = 5
MAX_FAILURES_TOTAL = 50
FAILURE_WINDOW_MS = 60 * 1000
#: The most client addresses whose failures are remembered (the oldest is dropped first).
MAX_CLIENTS = 10_000


def _mac(key: bytes, message: str) -> str:
    return hmac.new(key, message.encode("utf-8"), hashlib.sha256).hexdigest()


def token_matches(given: str, token: str) -> bool:
    """``given`` is the hub token, compared in constant time (over the hashes, so neither
    the length nor any prefix shows in the time taken). Either side may hold any string a
    request carried (a lone surrogate escaping a byte that is not UTF-8)."""
    return hmac.compare_digest(hashlib.sha256(given.encode("utf-8", "surrogatepass")).digest(),
                               hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest())


@attrs.define
class Sessions:
    """Issues and checks session cookies and their CSRF tokens."""

    token: str = attrs.field(repr=False)
    clock: Clock
    _key: bytes = attrs.field(init=False, repr=False)
    _revoked: dict[str, int] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        self._key = hmac.new(b"scopemem hub session", self.token.encode("utf-8"),
                             hashlib.sha256).digest()

    def issue(self) -> str:
        """A new session's cookie value: ``<id>.<expiry ms>.<signature>``."""
        session_id = secrets.token_urlsafe(18)
        payload = f"{session_id}.{self.clock() + SESSION_MS}"
        return f"{payload}.{_mac(self._key, payload)}"

    def session_id(self, cookie: str | None) -> str | None:
        """The id of the live session ``cookie`` holds, or None (absent, forged, expired,
        logged out). Only ASCII can be a cookie the hub issued."""
        if not cookie or not cookie.isascii() or cookie.count(".") != 2:
            return None
        session_id, expiry, signature = cookie.split(".")
        if not hmac.compare_digest(_mac(self._key, f"{session_id}.{expiry}"), signature):
            return None
        if not expiry.isdigit() or int(expiry) <= self.clock() or session_id in self._revoked:
            return None
        return session_id

    def revoke(self, cookie: str | None) -> None:
        """Refuse this session from now on (in this process; it expires everywhere)."""
        session_id = self.session_id(cookie)
        if session_id is None or cookie is None:
            return
        now = self.clock()
        self._revoked = {sid: until for sid, until in self._revoked.items() if until > now}
        self._revoked[session_id] = int(cookie.split(".")[1])

    def csrf(self, session_id: str) -> str:
        """The CSRF token of a session: every form of its pages carries it."""
        return _mac(self._key, f"csrf.{session_id}")

    def csrf_matches(self, session_id: str, given: object) -> bool:
        return (isinstance(given, str) and given.isascii()
                and hmac.compare_digest(self.csrf(session_id), given))


@attrs.define
class LoginLimiter:
    """Counts failed logins per client address and in total over a sliding window."""

    clock: Clock
    _clients: collections.OrderedDict[str, collections.deque[int]] = attrs.field(
        init=False, factory=collections.OrderedDict)
    _total: collections.deque[int] = attrs.field(init=False, factory=collections.deque)

    def _recent(self, times: collections.deque[int]) -> collections.deque[int]:
        floor = self.clock() - FAILURE_WINDOW_MS
        while times and times[0] <= floor:
            times.popleft()
        return times

    def blocked(self, client: str) -> bool:
        """Whether a login from ``client`` is refused now, whatever token it brings."""
        times = self._clients.get(client)
        if times is not None and len(self._recent(times)) >= MAX_FAILURES_PER_CLIENT:
            return True
        return len(self._recent(self._total)) >= MAX_FAILURES_TOTAL

    def failed(self, client: str) -> None:
        now = self.clock()
        times = self._clients.pop(client, None) or collections.deque()
        times.append(now)
        self._clients[client] = times
        while len(self._clients) > MAX_CLIENTS:
            self._clients.popitem(last=False)
        self._total.append(now)
