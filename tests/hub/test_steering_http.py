"""Steering from the hub's pages over HTTP, as a person goes through a long scope: a forget
brings them back where they were, a notice is said once, and what they looked up is shown
as the pages show a run id."""

from __future__ import annotations

import contextlib
import html
import re
import urllib.parse
from collections.abc import AsyncIterator

from aiohttp import ClientSession, CookieJar

from scopemem.config import load_config
from scopemem.core.records import Candidate, Kind
from scopemem.stores.memory import InMemoryStore
from scopemem.worker_aiohttp.app import create_app, running
from tests.hub.conftest import DATA_TOKEN, HUB_TOKEN, fact

CONFIG = load_config({"memory": {"enabled": True, "organization": "acme"}})
PERSON = "user:slack:U1"


async def _login(session: ClientSession, url: str) -> None:
    form = await (await session.get(f"{url}/hub/login")).text()
    nonce = re.search(r'name="nonce" value="([^"]+)"', form)
    assert nonce is not None
    answer = await session.post(f"{url}/hub/login", allow_redirects=False,
                                data={"nonce": nonce.group(1), "token": HUB_TOKEN})
    assert answer.status == 303


def _form_fields(page: str, method: str) -> dict[str, str]:
    """The fields of the page's first form sent to /hub/forget by ``method``, as a browser
    would send them."""
    form = re.search(rf'<form method="{method}" action="/hub/forget">(.*?)</form>', page, re.S)
    assert form is not None
    return {name: html.unescape(value) for name, value in
            re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form.group(1))}


async def _first_forget_form(session: ClientSession, url: str, page: str) -> dict[str, str]:
    """The fields of the form that forgets the first record a scope page lists: its Forget
    button opens the page asking to confirm, whose form it is."""
    asked = await session.get(f"{url}/hub/forget", params=_form_fields(page, "get"))
    assert asked.status == 200
    return _form_fields(await asked.text(), "post")


@contextlib.asynccontextmanager
async def _one_forget_form() -> AsyncIterator[tuple[str, ClientSession, InMemoryStore, str,
                                                    dict[str, str]]]:
    """A logged-in session on a hub whose person's scope holds one record: the hub's url,
    the session, the store, the scope's page and the form that forgets the record."""
    store = await _person_store("the api tests need make bootstrap first")
    app = create_app(store, DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        await _login(session, url)
        page = await (await session.get(f"{url}/hub/scope?key={PERSON}")).text()
        yield url, session, store, page, await _first_forget_form(session, url, page)


async def _person_store(*texts: str) -> InMemoryStore:
    """An in-process store whose person's scope holds ``texts``, oldest first."""
    store = InMemoryStore()
    await store.write(PERSON, [Candidate(kind=Kind.FACT, source_thread_key="slack:D1",
                                         text=text) for text in texts])
    return store


def _lessons(count: int) -> list[str]:
    return [f"lesson number {n} about the deploy train" for n in range(count)]


def _pager_links(page: str) -> list[str]:
    pager = re.search(r'<nav class="pager".*?</nav>', page, re.S)
    assert pager is not None
    return [html.unescape(link) for link in re.findall(r'href="([^"]+)"', pager.group(0))]


async def test_a_forget_returns_to_the_page_and_filters_it_was_made_from_saying_so_once():
    """Forgetting a record on page 2 of a filtered scope brought the person back to page 1,
    unfiltered; and the pager's links carried the notice, so every page after it said again
    that a record was forgotten."""
    store = await _person_store(*_lessons(120))
    app = create_app(store, DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        await _login(session, url)
        page = await (await session.get(
            f"{url}/hub/scope?key={PERSON}&status=active&page=2")).text()
        form = await _first_forget_form(session, url, page)
        answer = await session.post(f"{url}/hub/forget", data=form, allow_redirects=False)
        assert answer.status == 303
        back = answer.headers["Location"]
        assert "page=2" in back and "status=active" in back and "done=forgotten" in back
        landed = await (await session.get(f"{url}{back}")).text()
        assert "The record is forgotten" in landed
        assert form["id"] not in landed  # the filter shows active records only
        links = _pager_links(landed)
        assert links and not any("done=" in link for link in links)
        following = await (await session.get(f"{url}{links[0]}")).text()
        assert "The record is forgotten" not in following


async def test_a_forget_form_that_carries_no_place_or_a_forged_one_lands_on_the_scope():
    """The place a forget returns to is taken only from values a scope page could have
    sent; anything else is left out, never echoed into the redirect."""
    async with _one_forget_form() as (url, session, store, page, form):
        forged = {**form, "page": "0x2", "status": "gone", "kind": "//evil.example",
                  "source": "human\r\nX: 1"}
        answer = await session.post(f"{url}/hub/forget", data=forged, allow_redirects=False)
        assert answer.status == 303
        back = urllib.parse.urlsplit(answer.headers["Location"])
        assert back.path == "/hub/scope"
        assert urllib.parse.parse_qs(back.query) == {"key": [PERSON], "done": ["forgotten"]}


async def test_the_run_page_shows_the_run_it_looked_up_as_it_shows_a_run_id():
    """A run id that holds a bidi override (a record's run id links there) was echoed as
    typed by the run page's "no record reached" line, reversing what a person reads."""
    app = create_app(InMemoryStore(), DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        await _login(session, url)
        page = await (await session.get(f"{url}/hub/run?run=r-%E2%80%AEevil")).text()
        said = re.search(r"<p>No record reached (.*?) within the retention.</p>", page)
        assert said is not None and said.group(1) == "r-evil"


async def test_a_page_past_the_last_says_so_and_links_the_last_rather_than_nothing_held():
    """Forgetting the only active record of a filtered scope's last page lands on a page
    past the end: it said "no record of this scope matches these filters", and the
    overview's page past its end "no scope holds records"."""
    store = await _person_store(*_lessons(51))
    app = create_app(store, DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        await _login(session, url)
        page = await (await session.get(
            f"{url}/hub/scope?key={PERSON}&status=active&page=2")).text()
        form = await _first_forget_form(session, url, page)
        answer = await session.post(f"{url}/hub/forget", data=form, allow_redirects=False)
        landed = await (await session.get(f"{url}{answer.headers['Location']}")).text()
        assert "matches these filters" not in landed
        assert "past the last page" in landed
        assert any("page=1" in link for link in _pager_links(landed))
        overview = await (await session.get(f"{url}/hub/?page=3")).text()
        assert "No scope holds records" not in overview and "past the last page" in overview


async def test_a_search_brief_up_to_its_limit_in_any_script_is_searched():
    """A brief is taken up to 4,000 characters, but in the address a character outside
    ASCII takes up to twelve bytes: a brief of a thousand Chinese characters overran the
    HTTP parser's 8,190-byte request line and was refused as a malformed request."""
    store = InMemoryStore()
    await store.write("org:acme", [Candidate(kind=Kind.FACT, source_thread_key="slack:C1",
                                             text="部署 需要 先 运行 引导 脚本")])
    app = create_app(store, DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        await _login(session, url)
        brief = ("部署 " * 2000)[:4000]
        answer = await session.get(f"{url}/hub/search", params={"brief": brief})
        assert answer.status == 200 and "部署 需要" in await answer.text()
        longer = await session.get(f"{url}/hub/search", params={"brief": brief + "部"})
        assert longer.status == 400 and "longer than 4000 characters" in await longer.text()


async def test_forget_asks_first_and_forgets_only_once_confirmed():
    """A Forget button forgot the record at once, its text erased for good, one click
    after a person meant to press the row's link: now it opens a page naming the record,
    and only that page's button forgets it; Cancel goes back where the person was."""
    store = await _person_store("the api tests need make bootstrap first")
    app = create_app(store, DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        await _login(session, url)
        page = await (await session.get(f"{url}/hub/scope?key={PERSON}&status=active")).text()
        asked = await session.get(f"{url}/hub/forget", params=_form_fields(page, "get"))
        confirm = await asked.text()
        assert asked.status == 200 and "the api tests need make bootstrap first" in confirm
        assert [r.status.value for r in await store.list(PERSON, 5)] == ["active"]
        cancel = re.search(r'<a href="([^"]+)">Cancel</a>', confirm)
        assert cancel is not None
        back = urllib.parse.urlsplit(html.unescape(cancel.group(1)))
        assert back.path == "/hub/scope"
        assert urllib.parse.parse_qs(back.query) == {"key": [PERSON], "status": ["active"]}
        answer = await session.post(f"{url}/hub/forget", data=_form_fields(confirm, "post"),
                                    allow_redirects=False)
        assert answer.status == 303 and "done=forgotten" in answer.headers["Location"]
        assert await store.list(PERSON, 5) == []
        again = await session.get(f"{url}/hub/forget", params=_form_fields(page, "get"),
                                  allow_redirects=False)
        assert again.status == 303 and "done=already-forgotten" in again.headers["Location"]
        for bad, status in (("mem:user:slack:U1:9", 404), ("nonsense", 400)):
            assert (await session.get(f"{url}/hub/forget", params={"id": bad})).status == status


async def test_a_forget_sent_twice_says_the_record_is_forgotten_not_that_nothing_changed():
    """Enter pressed twice on the forget page sends its form twice: the first forgot the
    record, and the second's answer, the page the person landed on, said "That record was
    not active: nothing changed", as if the forget had failed. Back to the forget page
    said the same."""
    async with _one_forget_form() as (url, session, store, page, form):
        answers = [await session.post(f"{url}/hub/forget", data=form, allow_redirects=False)
                   for _ in range(2)]
        assert [answer.status for answer in answers] == [303, 303]
        assert "done=forgotten" in answers[0].headers["Location"]
        again = await session.get(f"{url}{answers[1].headers['Location']}")
        assert "already forgotten" in await again.text()
        back = await session.get(f"{url}/hub/forget", params=_form_fields(page, "get"))
        assert "already forgotten" in await back.text()


async def test_a_form_from_before_a_new_login_says_nothing_changed_and_what_to_do():
    """A forget page opened before logging in again (in another tab, once the session had
    ended) carries the old session's CSRF token: its refusal said the form was stale or
    not the hub's, neither whether anything changed nor how to send it again."""
    async with _one_forget_form() as (url, session, store, page, form):
        await _login(session, url)  # a new session: the form's token is the old one's
        answer = await session.post(f"{url}/hub/forget", data=form, allow_redirects=False)
        said = html.unescape(await answer.text())
        assert answer.status == 403
        assert "Nothing was changed" in said and "send it again" in said
        assert [r.status.value for r in await store.list(PERSON, 5)] == ["active"]


async def test_a_sweep_applied_after_the_scope_changed_retires_nothing_it_did_not_list():
    """Applying a dry run retired whatever the gate refused at that moment: a status line
    written after the dry run was retired too, unlisted, under "the listed facts are
    retired". Now the hub shows the new dry run instead, saying the scope changed."""
    repo = "repo:acme/api"
    store = InMemoryStore()
    listed, later = "PR 1901 was merged at sha 9c8b7a6", "PR 1902 was merged at sha 1a2b3c4"
    await store.write(repo, [fact(listed)])
    app = create_app(store, DATA_TOKEN, hub_token=HUB_TOKEN, hub_config=CONFIG)
    async with running(app) as url, ClientSession(cookie_jar=CookieJar(unsafe=True)) as session:
        await _login(session, url)

        async def apply_form() -> tuple[str, dict[str, str]]:
            page = html.unescape(await (await session.get(f"{url}/hub/sweep?key={repo}"))
                                 .text())
            form = re.search(r'<form method="post" action="/hub/sweep">(.*?)</form>', page,
                             re.S)
            assert form is not None
            return page, dict(re.findall(r'name="([^"]+)" value="([^"]*)"', form.group(1)))

        page, form = await apply_form()
        assert listed in page and later not in page
        await store.write(repo, [fact(later)])
        answer = await session.post(f"{url}/hub/sweep", data=form, allow_redirects=False)
        assert answer.status == 303
        assert {r.text for r in await store.list(repo, 5)} == {listed, later}
        shown = html.unescape(await (await session.get(f"{url}{answer.headers['Location']}"))
                              .text())
        assert "changed since" in shown and listed in shown and later in shown
        page, form = await apply_form()
        answer = await session.post(f"{url}/hub/sweep", data=form, allow_redirects=False)
        assert "done=swept" in answer.headers["Location"]
        assert await store.list(repo, 5) == []
