"""The hub's guard over HTTP, against the real worker: no token no hub, the strict headers on
every hub answer, sessions that cannot be forged or outlive their expiry, rate-limited logins,
and the overview's thresholds."""

from __future__ import annotations

import asyncio
import html
import logging
import re

import pytest
from aiohttp import ClientSession, CookieJar

from scopemem.config import load_config
from scopemem.core.browse import CountTotal, Reach
from scopemem.core.records import Candidate, CountRow, Kind
from scopemem.hub import hub_token_problem
from scopemem.hub import overview as ov
from scopemem.hub.auth import MAX_FAILURES_PER_CLIENT, SESSION_MS, Sessions
from scopemem.stores.base import wall_clock_ms
from scopemem.stores.memory import InMemoryStore
from scopemem.worker_aiohttp.app import create_app, running
from tests.conftest import FakeClock
from tests.hub.conftest import DATA_TOKEN, HUB_TOKEN

CONFIG = load_config({"memory": {"enabled": True, "organization": "acme"}})


async def _login(session: ClientSession, url: str, token: str = HUB_TOKEN) -> int:
    form = await (await session.get(f"{url}/hub/login")).text()
    nonce = re.search(r'name="nonce" value="([^"]+)"', form)
    assert nonce is not None
    answer = await session.post(f"{url}/hub/login", allow_redirects=False,
                                data={"nonce": nonce.group(1), "token": token})
    return answer.status


async def test_without_a_hub_token_every_hub_path_is_a_404():
    app = create_app(InMemoryStore(), DATA_TOKEN)
    async with running(app) as url, ClientSession() as session:
        for path in ("/hub", "/hub/", "/hub/login", "/hub/static/hub.css"):
            assert (await session.get(f"{url}{path}")).status == 404


async def test_every_hub_answer_carries_the_strict_headers():
    app = create_app(InMemoryStore(), DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession() as session:
        for path in ("/hub/login", "/hub/static/hub.css", "/hub/nowhere", "/hub/"):
            answer = await session.get(f"{url}{path}", allow_redirects=False)
            policy = answer.headers["Content-Security-Policy"]
            assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
            assert "unsafe-inline" not in policy
            assert answer.headers["X-Content-Type-Options"] == "nosniff"
        healthz = await session.get(f"{url}/healthz")
        assert "Content-Security-Policy" not in healthz.headers  # the data routes are as before


async def test_a_session_cookie_is_httponly_strict_and_bound_to_the_token():
    app = create_app(InMemoryStore(), DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        form = await (await session.get(f"{url}/hub/login")).text()
        nonce = re.search(r'name="nonce" value="([^"]+)"', form).group(1)  # type: ignore[union-attr]
        answer = await session.post(f"{url}/hub/login", allow_redirects=False,
                                    data={"nonce": nonce, "token": HUB_TOKEN})
        cookie = answer.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    forged = Sessions("another-token-0123456789", FakeClock()).issue()
    async with running(app) as url, ClientSession() as session:
        answer = await session.get(f"{url}/hub/", allow_redirects=False,
                                   cookies={"scopemem_hub": forged})
        assert answer.status == 303 and answer.headers["Location"] == "/hub/login"


def test_a_session_ends_at_its_expiry_and_at_logout():
    clock = FakeClock()
    sessions = Sessions(HUB_TOKEN, clock)
    cookie = sessions.issue()
    session_id = sessions.session_id(cookie)
    assert session_id is not None
    assert sessions.csrf_matches(session_id, sessions.csrf(session_id))
    tampered = cookie.replace(cookie.split(".")[1], str(clock.now + 10 * SESSION_MS))
    assert sessions.session_id(tampered) is None
    clock.advance(SESSION_MS)
    assert sessions.session_id(cookie) is None
    fresh = sessions.issue()
    sessions.revoke(fresh)
    assert sessions.session_id(fresh) is None


async def test_logins_are_rate_limited_per_client_even_with_the_right_token():
    app = create_app(InMemoryStore(), DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        for _ in range(MAX_FAILURES_PER_CLIENT):
            assert await _login(session, url, "wrong-token") == 303
        assert await _login(session, url) == 429


def test_the_hub_token_must_be_long_and_not_the_data_token():
    assert "differ" in (hub_token_problem(DATA_TOKEN, DATA_TOKEN) or "")
    assert "16" in (hub_token_problem("short", DATA_TOKEN) or "")
    # Its login strips whitespace around a pasted token: one inside it could never match.
    for token in ("a hub token with spaces", "hub-token-\u00e9-long-enough"):
        assert "printable ASCII" in (hub_token_problem(token, DATA_TOKEN) or "")
    assert hub_token_problem(HUB_TOKEN, DATA_TOKEN) is None


@pytest.mark.parametrize(("key", "rows", "raised"), [
    ("repo:a/b", [CountRow("repo:a/b", 9, "inserted", 41)], ["more than 40"]),
    ("org:a", [CountRow("org:a", 9, "inserted", 41)], []),  # 40 a day is a repository's
    ("org:a", [CountRow("org:a", 9, "offered", 10), CountRow("org:a", 9, "rejected", 2)],
     ["gate rejected 20%"]),
    ("org:a", [CountRow("org:a", 9, "offered", 10), CountRow("org:a", 9, "rejected", 1)], []),
    ("org:a", [CountRow("org:a", 9, "restated", 3), CountRow("org:a", 9, "inserted", 2)],
     ["restated outran"]),
])
def test_the_overview_flags_each_of_003s_thresholds_only_when_crossed(key, rows, raised):
    flags = ov.flags(key, rows)
    assert len(flags) == len(raised)
    assert all(flag.startswith(prefix) for flag, prefix in zip(flags, raised, strict=True))


def total(day: int, name: str, value: int, most: int | None = None) -> CountTotal:
    return CountTotal(day=day, name=name, total=value, most=value if most is None else most)


def test_a_chart_marks_the_days_a_threshold_was_crossed():
    chart = ov.chart("repo", [total(6, "inserted", 60, most=30),  # no one scope above 40
                              total(7, "offered", 10), total(7, "rejected", 2),
                              total(8, "inserted", 3),
                              total(9, "inserted", 45)], today=10, days=5)
    assert [bar.flagged for bar in chart.bars] == [False, True, False, True, False]
    assert [bar.inserted for bar in chart.bars] == [60, 0, 3, 45, 0]
    assert chart.bars[1].share == 0.2
    assert chart.limit_y is not None


async def test_a_run_page_shows_up_to_the_newest_500_reaches_and_says_when_it_stops():
    """A thread key's runs add up (each block shows dozens of records): its page lists
    every reach up to the store's 500, newest first, and says when there may be older ones;
    a record's page says so past its 100."""
    store = InMemoryStore()
    await store.write("org:acme", [Candidate(kind=Kind.FACT, source_thread_key="slack:C1/1",
                                             text="the api tests need make bootstrap first")])
    [record] = await store.list("org:acme", 1)
    now = wall_clock_ms()
    for start in range(0, 650, 130):  # the most a call takes is 256
        await store.log_reaches([
            Reach(record_id=record.id, scope_key="org:acme", run_id=f"r-{n}",
                  thread_key="slack:C1/1" if n < 520 else "slack:C1/2", at_ms=now - n)
            for n in range(start, start + 130)])
    app = create_app(store, DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        assert await _login(session, url) == 303

        async def rows(path: str) -> tuple[int, bool]:
            page = await (await session.get(f"{url}/hub/{path}")).text()
            return page.count("<tr><td>"), "older ones are not" in page

        assert await rows("run?run=slack:C1/2") == (130, False)  # every one of them
        assert await rows("run?run=slack:C1/1") == (500, True)
        assert await rows(f"record?scope=org:acme&id={record.id}") == (100, True)


async def _raw(url: str, request: bytes) -> tuple[int, bytes]:
    """The status and head of the answer to ``request``, sent as raw bytes (a browser never
    sends a byte that is not ASCII in a cookie; a hostile client may)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), head
    finally:
        writer.close()


async def test_bytes_that_are_not_ascii_in_cookies_and_forms_are_refused_not_500(caplog):
    """A session cookie, a login nonce or a CSRF token holding a byte that is not ASCII (or
    not UTF-8) is refused as a forged one, without a traceback: the comparisons take only
    what the hub issues."""
    app = create_app(InMemoryStore(), DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        assert await _login(session, url) == 303
        page = await (await session.get(f"{url}/hub/")).text()
        assert re.search(r'name="csrf" value="([^"]+)"', page)
        for csrf in ("%C3%A9", "%FF"):
            answer = await session.post(f"{url}/hub/sweep", allow_redirects=False,
                                        data=f"key=org:acme&csrf={csrf}".encode(),
                                        headers={"Content-Type":
                                                 "application/x-www-form-urlencoded"})
            assert answer.status == 403
        nonce = b"\xe9" * 20
        form = b"nonce=%C3%A9&token=x"
        answers = [
            await _raw(url, b"GET /hub/ HTTP/1.1\r\nHost: x\r\nCookie: scopemem_hub=a.b.\xe9\r\n"
                            b"Connection: close\r\n\r\n"),
            await _raw(url, b"GET /hub/login HTTP/1.1\r\nHost: x\r\nCookie: scopemem_hub_login="
                            + nonce + b"\r\nConnection: close\r\n\r\n"),
            await _raw(url, b"POST /hub/login HTTP/1.1\r\nHost: x\r\nCookie: scopemem_hub_login="
                            + nonce + b"\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                            b"Content-Length: " + str(len(form)).encode() + b"\r\n"
                            b"Connection: close\r\n\r\n" + form),
        ]
    assert [status for status, _head in answers] == [303, 200, 403]
    assert b"scopemem_hub_login=" + nonce not in answers[1][1]  # a fresh nonce instead
    assert "Traceback" not in caplog.text and "failed" not in caplog.text


@pytest.mark.parametrize("page", ["%C2%B2", "9" * 5000, "0x10", "%D9%A5"])
async def test_a_page_number_that_is_not_plain_digits_is_a_400_page(page, caplog):
    app = create_app(InMemoryStore(), DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        assert await _login(session, url) == 303
        for path in (f"/hub/?page={page}", f"/hub/scope?key=org:acme&page={page}"):
            answer = await session.get(f"{url}{path}", allow_redirects=False)
            assert answer.status == 400
            assert "page takes a number" in await answer.text()
    assert "Traceback" not in caplog.text


async def test_the_hub_without_its_slash_redirects_to_it():
    app = create_app(InMemoryStore(), DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession() as session:
        answer = await session.get(f"{url}/hub", allow_redirects=False)
        assert answer.status == 308 and answer.headers["Location"] == "/hub/"


async def test_a_head_request_reads_like_a_get():
    """``HEAD`` of a page is a read: a session's is answered as its ``GET``, and one without
    a session is sent to the login, not told its form is stale."""
    app = create_app(InMemoryStore(), DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        answer = await session.head(f"{url}/hub/", allow_redirects=False)
        assert answer.status == 303 and answer.headers["Location"] == "/hub/login"
        assert await _login(session, url) == 303
        assert (await session.head(f"{url}/hub/", allow_redirects=False)).status == 200


@pytest.mark.parametrize("path", ["/hub/run?run=r%001", "/hub/search?brief=deploy%00s",
                                  "/hub/search?brief=deploy&user=U%001"])
async def test_a_nul_character_in_a_pages_field_is_a_400_page(path):
    """No store is asked with a NUL character (PostgreSQL cannot take one: the run page
    answered 500 over it), as the worker's routes refuse one."""
    app = create_app(InMemoryStore(), DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        assert await _login(session, url) == 303
        answer = await session.get(f"{url}{path}", allow_redirects=False)
        assert answer.status == 400 and "NUL character" in await answer.text()


REPO_RULE = "repo takes owner/name as a clone's remote names it"


@pytest.mark.parametrize(("query", "says"), [
    ("repo=https://github.com/acme/api", f"{REPO_RULE}: acme/api"),
    ("repo=acme/api.git", f"{REPO_RULE}: acme/api"),
    ("repo=acme", f"{REPO_RULE} (e.g. acme/api)"),
    ("user=user:slack:U0123", "user takes the platform id (e.g. slack:U0123), not the user scope"),
    ("channel=channel:slack:C1", "channel takes the platform id (e.g. slack:C0456), not the"),
    ("user=slack:U%201", "user: must not contain whitespace"),
])
async def test_a_searchs_inputs_that_name_no_runs_scope_are_a_400_page(query, says):
    """The repository, channel and person of a search are what a run carries, checked as
    the command line checks them: a URL, or a scope key given for an id, would preview a
    scope no run reads, as if it were empty."""
    app = create_app(InMemoryStore(), DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        assert await _login(session, url) == 303
        answer = await session.get(f"{url}/hub/search?brief=deploy&{query}",
                                   allow_redirects=False)
        text = html.unescape(await answer.text())
        assert answer.status == 400 and says in text
        fine = await session.get(f"{url}/hub/search?brief=deploy&repo=acme/api&user=slack:U1"
                                 "&channel=slack:C1", allow_redirects=False)
        assert fine.status == 200


@pytest.mark.parametrize("key", ["org", "me", "bogus"])
async def test_a_scope_page_for_a_word_that_is_no_scope_key_is_a_400_page(key):
    """A scope word (or any value without its ``<kind>:``) names no scope: the page showed
    an empty scope, with its steering, as if the scope held nothing."""
    app = create_app(InMemoryStore(), DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        assert await _login(session, url) == 303
        answer = await session.get(f"{url}/hub/scope?key={key}", allow_redirects=False)
        assert answer.status == 400 and "a key is &lt;kind&gt;:&lt;id&gt;" in await answer.text()
        assert (await session.get(f"{url}/hub/scope?key=org:acme")).status == 200


@pytest.mark.parametrize("path", [b"/hub/login", b"/hub/sweep"])
async def test_a_form_dribbled_slower_than_the_body_deadline_is_408_and_closed(path):
    """A form has the data routes' body deadline: a client sending it a byte at a time
    cannot hold a connection (the login form needs no session, so it could hold every one
    the worker has, and the data routes with them)."""
    from scopemem.worker_aiohttp.app import Limits

    app = create_app(InMemoryStore(), DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    session = Sessions(HUB_TOKEN, wall_clock_ms).issue()
    async with running(app, limits=Limits(body_timeout=0.3)) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nCookie: scopemem_hub="
                     + session.encode() + b"\r\nContent-Type: application/x-www-form-urlencoded"
                     b"\r\nContent-Length: 100\r\n\r\nkey=org")
        try:
            answer = await asyncio.wait_for(reader.read(), 5)  # the server closes it
        finally:
            writer.close()
    assert answer.startswith(b"HTTP/1.1 408")


async def test_a_form_cut_short_by_its_client_is_one_line_not_a_traceback(caplog):
    caplog.set_level(logging.INFO, logger="scopemem")
    app = create_app(InMemoryStore(), DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url:
        host, port = url.removeprefix("http://").split(":")
        _reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /hub/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/"
                     b"x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nkey=org")
        await writer.drain()
        writer.close()
        for _ in range(50):
            await asyncio.sleep(0.02)
            if "mid-form" in caplog.text:
                break
    assert "mid-form" in caplog.text
    assert "Traceback" not in caplog.text and "ERROR" not in caplog.text


async def test_a_hub_without_an_organisation_says_so_at_start_and_names_the_setting(caplog):
    """A worker started without ``memory.organization`` (the quick start's, with a hub token
    set) lists an org scope but cannot change it: the start says so once, and the refusal
    names the setting, where it said the scope was another organisation's."""
    caplog.set_level(logging.WARNING, logger="scopemem")
    store = InMemoryStore()
    await store.write("org:acme", [Candidate(kind=Kind.FACT, text="run make bootstrap first",
                                             source_thread_key="slack:C1/1")])
    app = create_app(store, DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=load_config({}))
    assert "memory.organization" in caplog.text
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        assert await _login(session, url) == 303
        page = await (await session.get(f"{url}/hub/scope?key=org:acme")).text()
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf is not None
        answer = await session.post(f"{url}/hub/forget",
                                    data={"csrf": csrf.group(1), "id": "mem:org:acme:1"})
        body = await answer.text()
        # Read before the worker's cleanup closes the store.
        assert (await store.list("org:acme", 5))[0].text == "run make bootstrap first"
    assert answer.status == 403
    assert "memory.organization" in body and "another organisation" not in body


async def test_an_overview_order_it_does_not_take_is_a_400_page_naming_the_choices():
    """``order`` was read as "desc or anything else": ``order=bogus`` (a hand-edited
    address) showed the ascending page as if asked for, where ``sort`` says what it takes."""
    app = create_app(InMemoryStore(), DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        assert await _login(session, url) == 303
        for order in ("bogus", "DESC", "%00"):
            answer = await session.get(f"{url}/hub/?order={order}", allow_redirects=False)
            assert answer.status == 400
            assert "order takes one of asc, desc" in await answer.text()
        for order in ("asc", "desc", ""):
            assert (await session.get(f"{url}/hub/?sort=active&order={order}")).status == 200


@pytest.mark.parametrize("path", ["/hub/static/nope.js", "/hub/static/", "/hub/static/sub/x.css"])
async def test_a_static_file_that_does_not_exist_is_the_hubs_404_page(path):
    """A static file that does not exist answered a bare 404 (an empty body sent as
    ``application/octet-stream``), and the static directory a 403, where every other
    refusal of the hub (a page that does not exist among them) is its own page saying
    why."""
    app = create_app(InMemoryStore(), DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession() as session:
        answer = await session.get(f"{url}{path}", allow_redirects=False)
        assert answer.status == 404
        assert answer.headers["Content-Type"].startswith("text/html")
        page = await answer.text()
        assert '<p class="error" role="alert">' in page
        assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]
        css = await session.get(f"{url}/hub/static/hub.css")
        assert css.status == 200 and css.headers["Content-Type"].startswith("text/css")


@pytest.mark.parametrize("scope_key", ["org:globex", "guild:77"])
async def test_a_scope_the_gate_closes_to_everyone_shows_none_of_its_records(scope_key):
    """Another organisation's scope and a kind no plugin registers are closed to everyone:
    their export and sweep were refused, but their scope page, their records' pages and the
    forget page showed every record's text to whoever edited the address."""
    secret = "the merger closes on friday"
    store = InMemoryStore()
    for key in (scope_key, "org:acme"):
        await store.write(key, [Candidate(kind=Kind.FACT, text=f"{secret} ({key})",
                                          source_thread_key="slack:C1/1")])
    app = create_app(store, DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        assert await _login(session, url) == 303
        for path in (f"scope?key={scope_key}", f"record?id=mem:{scope_key}:1",
                     f"forget?id=mem:{scope_key}:1"):
            answer = await session.get(f"{url}/hub/{path}", allow_redirects=False)
            page = await answer.text()
            assert answer.status == 403, path
            assert secret not in page and "nobody" in page
        for path in ("scope?key=org:acme", "record?id=mem:org:acme:1", "forget?id=mem:org:acme:1"):
            assert secret in await (await session.get(f"{url}/hub/{path}")).text()


async def test_a_pasted_token_with_spaces_around_it_logs_in():
    """A token pasted with a space or a line break around it (copied from a terminal) was
    "not the hub token", in a password field that hides the space, and counted as a failed
    login. A hub token holds no whitespace (``hub_token_problem``), so none is dropped."""
    app = create_app(InMemoryStore(), DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url:
        for pasted, opens in ((f" {HUB_TOKEN} ", True), (f"{HUB_TOKEN}\n", True),
                              (f"\t{HUB_TOKEN}\r\n", True), (f"{HUB_TOKEN} x", False)):
            async with ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
                assert await _login(session, url, pasted) == 303
                answer = await session.get(f"{url}/hub/", allow_redirects=False)
                assert (answer.status == 200) is opens, repr(pasted)
