"""The Memory Hub in a real browser: headless Chromium, driven by Playwright, against a real
worker over SQLite and over PostgreSQL. Each test, logged in (once per store, through the login
page), does what a person does and checks the store changed (or did not). The flows that change
the store, and the overview, run on every store; the others (the hub's own guards and pages) on
SQLite alone, since what they read of a store is the browsing contract every store passes
(tests/stores/test_browsing.py). Every run takes screenshots of each page into a temp directory
per store; with ``SCOPEMEM_HUB_SCREENSHOTS=docs/hub`` the SQLite run's also replace the ones
docs/hub.md shows.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scopemem.core.records import Status
from tests.hub.conftest import (
    HUB_TOKEN,
    LESSON,
    ORG,
    PERSON,
    REPO,
    SCREENSHOTS_ENV,
    STATUS_FACT,
    STORES,
    HubServer,
    fact,
)

pytest.importorskip("playwright")

#: A test of the hub's own guards (sign-in, CSRF, rendering, keyboard): on SQLite only. Every
#: page a person reads or acts through (overview, a scope's records, search and preview, a
#: record and its runs, forget, sweep, delete, export) runs on every store.
sqlite_only = pytest.mark.parametrize("hub", [kind for kind in STORES if kind == "sqlite"],
                                      indirect=True)


def log_in(page: Any, hub: HubServer) -> None:
    page.goto(f"{hub.url}/hub/")
    page.fill("#token", HUB_TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(f"{hub.url}/hub/")


def new_tab(browser: Any, **options: Any) -> tuple[Any, Any]:
    """A tab in a browser context of its own: its own cookies."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, **options)
    tab = context.new_page()
    tab.set_default_timeout(10_000)
    return context, tab


@pytest.fixture(scope="module")
def signed_in(browser: Any, hub: HubServer) -> dict[str, Any]:
    """The cookies of one login through the page, per store: the tests of what a person
    does once logged in start from them, rather than each typing the token again."""
    context, tab = new_tab(browser)
    log_in(tab, hub)
    state: dict[str, Any] = context.storage_state()
    context.close()
    return state


@pytest.fixture
def page(browser: Any, signed_in: dict[str, Any]) -> Iterator[Any]:
    """A tab, logged in (``signed_in``)."""
    context, tab = new_tab(browser, storage_state=signed_in)
    yield tab
    context.close()


@pytest.fixture
def logged_out(browser: Any, hub: HubServer) -> Iterator[Any]:
    """A tab with no session: for the tests of logging in."""
    context, tab = new_tab(browser)
    yield tab
    context.close()


def shot(page: Any, hub: HubServer, name: str) -> None:
    """The page's screenshot in the run's directory, and in ``$SCOPEMEM_HUB_SCREENSHOTS``
    from the SQLite run when that is set."""
    path = hub.shots / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    wanted = os.environ.get(SCREENSHOTS_ENV)
    if wanted and hub.kind == "sqlite":  # one store's run is enough
        Path(wanted).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(wanted) / path.name)


def search(page: Any, brief: str, repo: str) -> None:
    """Search the brief from the search page, with the repository, and wait for the
    preview."""
    page.fill("#brief", brief)
    page.fill("input[name=repo]", repo)
    page.click("text=Search and preview")
    page.wait_for_selector("#results pre.preview")


def records_of(hub: HubServer, scope_key: str) -> dict[str, Any]:
    page = hub.call(hub.store.record_page(scope_key, limit=200))
    return {record.text: record for record in page.rows}


@sqlite_only
def test_login_refuses_a_wrong_token_then_opens_a_session_that_logout_ends(logged_out, hub):
    page = logged_out
    page.goto(f"{hub.url}/hub/")
    assert page.url.endswith("/hub/login")
    shot(page, hub, "login")
    page.fill("#token", "not-the-token")
    page.click("button[type=submit]")
    assert "not the hub token" in page.inner_text("main")
    log_in(page, hub)
    assert page.inner_text("h1") == "Memory overview"
    page.click("text=Log out")
    page.wait_for_url(f"{hub.url}/hub/login")
    page.goto(f"{hub.url}/hub/")
    assert page.url.endswith("/hub/login")


def test_overview_shows_every_scope_its_counters_and_the_thresholds_crossed(page, hub):
    page.goto(f"{hub.url}/hub/")
    table = page.inner_text("table")
    for key in (ORG, REPO, PERSON):
        assert key in table
    repo_row = page.locator("tr", has_text=REPO)
    assert "more than 40 lessons on a day" in repo_row.inner_text()
    assert "gate rejected 16% of facts offered" in repo_row.inner_text()
    assert "flagged" in (repo_row.get_attribute("class") or "")
    assert page.locator("svg.chart").count() == 4  # org, repo, channel, user
    shot(page, hub, "overview")
    page.select_option("select[name=kind]", "repo")
    page.click("text=Show")
    assert ORG not in page.inner_text("table")
    page.click(f"text={REPO}")
    assert page.inner_text("h1") == f"Scope {REPO}"
    assert LESSON in page.inner_text("table")
    shot(page, hub, "scope")


def test_search_shows_hits_and_the_block_a_run_would_get_and_counts_nothing(page, hub):
    before = records_of(hub, REPO)[LESSON]
    page.goto(f"{hub.url}/hub/")
    page.click("nav >> text=Search")
    search(page, "how do I run the api tests", "acme/api")
    hits = page.inner_text("#results table")
    assert LESSON in hits
    preview = page.inner_text("pre.preview")
    assert preview.startswith("Background memory for org:acme + repo:acme/api")
    assert "<background_memory>" in preview and LESSON in preview
    shot(page, hub, "search")
    after = records_of(hub, REPO)[LESSON]
    assert (after.use_count, after.last_used_at) == (before.use_count, before.last_used_at)


def test_a_record_shows_its_provenance_history_and_the_runs_it_reached(page, hub):
    record = records_of(hub, REPO)[LESSON]
    page.goto(f"{hub.url}/hub/record?id={record.id}")
    facts = page.inner_text("dl.facts")
    assert "slack:C1/100" in facts and "r-1" in facts
    assert "r-42" in page.inner_text("table")  # the run its window reached
    shot(page, hub, "record")
    page.click("table >> text=r-42")
    assert record.id in page.inner_text("table")
    shot(page, hub, "run")


def test_forget_from_the_scope_page_asks_first_then_forgets_the_record_in_the_store(page, hub):
    """The Forget button forgot the record (its text erased for good) on one click; it
    opens a page naming the record now, and Cancel there changes nothing."""
    target = records_of(hub, PERSON)["prefers answers with the command first"]
    page.goto(f"{hub.url}/hub/scope?key={PERSON}")
    page.click(f"button[aria-label='Forget {target.id}']")
    assert page.inner_text("h1") == f"Forget {target.id}?"
    assert "prefers answers with the command first" in page.inner_text("main")
    assert records_of(hub, PERSON)[target.text].status is Status.ACTIVE
    shot(page, hub, "forget")
    page.click("text=Cancel")
    assert page.inner_text("h1") == f"Scope {PERSON}"
    assert records_of(hub, PERSON)[target.text].status is Status.ACTIVE
    page.click(f"button[aria-label='Forget {target.id}']")
    page.click("text=Forget this record")
    assert "forgotten" in page.inner_text("[role=status]")
    statuses = {r.id: r.status for r in records_of(hub, PERSON).values()}
    assert statuses[target.id] is Status.FORGOTTEN


def test_sweep_lists_what_would_go_with_its_markers_then_applies(page, hub):
    page.goto(f"{hub.url}/hub/scope?key={ORG}")
    page.click("text=Sweep: dry run")
    listing = page.inner_text("table")
    assert STATUS_FACT in listing and "deploys go through" not in listing
    assert records_of(hub, ORG)[STATUS_FACT].status is Status.ACTIVE  # a dry run
    shot(page, hub, "sweep")
    page.click("text=Apply the sweep")
    assert "sweep is applied" in page.inner_text("[role=status]")
    assert records_of(hub, ORG)[STATUS_FACT].status is Status.SWEPT


@sqlite_only
def test_a_poisoned_record_renders_as_text_and_runs_nothing(page, hub):
    dialogs: list[str] = []
    errors: list[str] = []
    requests: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("request", lambda request: requests.append(request.url))
    page.goto(f"{hub.url}/hub/scope?key={REPO}")
    cell = page.locator("td.text", has_text="SYSTEM: obey").inner_text()
    # The markup shows as the characters it is made of; the bidi override is gone.
    assert "<script>alert('x')</script>" in cell and "<img src=x onerror=alert(2)>" in cell
    assert "</background_memory>" in cell and "\u202e" not in cell
    assert page.locator("main script, main img").count() == 0
    page.goto(f"{hub.url}/hub/search?brief=obey+alert&repo=acme/api")
    assert "SYSTEM: obey" in page.inner_text("#results")
    assert dialogs == [] and errors == []
    allowed = (f"{hub.url}/hub/scope", f"{hub.url}/hub/search", f"{hub.url}/hub/static/")
    assert [url for url in requests if not url.startswith(allowed)] == []


@sqlite_only
def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(page, hub):
    target = records_of(hub, REPO)[LESSON]
    page.goto(f"{hub.url}/hub/")
    assert page.url == f"{hub.url}/hub/"  # a session: only the CSRF token is missing
    answer = page.request.post(f"{hub.url}/hub/forget", form={"id": target.id})
    assert answer.status == 403
    wrong = page.request.post(f"{hub.url}/hub/forget", form={"id": target.id, "csrf": "0" * 64})
    assert wrong.status == 403
    assert records_of(hub, REPO)[LESSON].status is Status.ACTIVE


def test_delete_scope_needs_its_key_typed_back(page, hub):
    hub.call(hub.store.write("channel:slack:C9", [
        __import__("tests.hub.conftest", fromlist=["fact"]).fact("a channel to delete")]))
    page.goto(f"{hub.url}/hub/scope?key=channel:slack:C9")
    page.fill("#confirm", "channel:slack:C8")
    page.click("text=Delete scope")
    assert "type its key exactly" in page.inner_text("main")
    assert records_of(hub, "channel:slack:C9")
    page.goto(f"{hub.url}/hub/scope?key=channel:slack:C9")
    page.fill("#confirm", "channel:slack:C9")
    page.click("text=Delete scope")
    assert "scope is deleted" in page.inner_text("[role=status]")
    assert records_of(hub, "channel:slack:C9") == {}


def test_export_downloads_the_scope_as_json_lines(page, hub):
    page.goto(f"{hub.url}/hub/scope?key={REPO}")
    with page.expect_download() as download:
        page.click("text=Export as JSON Lines")
    lines = download.value.path().read_text().splitlines()
    assert len(lines) == len(records_of(hub, REPO))
    assert all(line.startswith('{"id": "mem:repo:acme/api:') for line in lines)


@sqlite_only
def test_the_main_flows_work_from_the_keyboard(logged_out, hub):
    page = logged_out
    page.goto(f"{hub.url}/hub/")
    # The token field takes the focus on arrival (autofocus, which a busy browser may apply
    # a frame after the load event): wait for it rather than type into nothing.
    page.wait_for_function("document.activeElement && document.activeElement.id === 'token'")
    page.keyboard.type(HUB_TOKEN)
    page.keyboard.press("Enter")
    page.wait_for_url(f"{hub.url}/hub/")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Search"
    page.keyboard.press("Enter")
    page.wait_for_url(f"{hub.url}/hub/search")
    page.keyboard.press("Tab")  # skip link
    for _ in range(4):  # the nav's three links and log out
        page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "brief"
    page.keyboard.type("api tests")
    page.keyboard.press("Tab")
    page.keyboard.type("acme/api")
    for _ in range(3):  # channel, person, the button
        page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Search and preview"
    page.keyboard.press("Enter")
    page.wait_for_selector("pre.preview")
    assert LESSON in page.inner_text("#results")


@sqlite_only
def test_a_search_the_hub_refuses_says_why_where_the_results_go(page, hub):
    """With htmx, a refused search (a URL for the repository) changed nothing on the page:
    htmx drops a 400's answer, so the person's click did nothing they could see."""
    page.goto(f"{hub.url}/hub/search")
    page.wait_for_function("window.htmx !== undefined")
    page.fill("#brief", "api tests")
    page.fill("input[name=repo]", "https://github.com/acme/api")
    page.click("text=Search and preview")
    alert = page.locator("#results [role=alert]")
    alert.wait_for()
    assert "owner/name" in alert.inner_text() and "acme/api" in alert.inner_text()
    assert page.locator("#results nav, #results h1").count() == 0  # the reason, not a page
    page.fill("input[name=repo]", "acme/api")
    page.click("text=Search and preview")
    page.wait_for_selector("#results pre.preview")
    assert LESSON in page.inner_text("#results")
    assert page.locator("#results [role=alert]").count() == 0


@sqlite_only
def test_a_narrow_window_keeps_every_page_on_screen(browser, signed_in, hub):
    """On a phone-wide window the pages ran off the screen's right edge: the header pushed
    Log out out of view, and the tables widened the whole page while squeezing a record's
    text to a letter or two a line. A wide table now scrolls in its own box."""
    context = browser.new_context(viewport={"width": 360, "height": 740},
                                  storage_state=signed_in)
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        record = records_of(hub, REPO)[LESSON]
        for path in ("/hub/", f"/hub/scope?key={REPO}", f"/hub/record?id={record.id}",
                     "/hub/search?brief=api+tests&repo=acme/api", "/hub/run?run=r-42"):
            page.goto(f"{hub.url}{path}")
            width = page.evaluate("document.documentElement.clientWidth")
            assert page.evaluate("document.documentElement.scrollWidth") <= width, path
            logout = page.get_by_role("button", name="Log out").bounding_box()
            assert logout is not None and logout["x"] + logout["width"] <= width, path
        page.goto(f"{hub.url}/hub/scope?key={REPO}")
        text = page.locator("td.text", has_text=LESSON).bounding_box()
        assert text is not None and text["width"] >= 180
    finally:
        context.close()


@sqlite_only
def test_a_search_after_the_session_ended_goes_to_the_login_page_whole(browser, hub):
    """A search once the session had ended (logged out in another tab, expired) put the
    whole login page, header and all, inside the search page's results box."""
    context, tab = new_tab(browser)
    try:
        log_in(tab, hub)
        tab.goto(f"{hub.url}/hub/search")
        tab.wait_for_function("window.htmx !== undefined")
        other = context.new_page()
        other.goto(f"{hub.url}/hub/")
        other.click("text=Log out")
        other.wait_for_url(f"{hub.url}/hub/login")
        tab.fill("#brief", "api tests")
        tab.click("text=Search and preview")
        tab.wait_for_url(f"{hub.url}/hub/login")
        tab.wait_for_selector("#token")
        assert tab.locator("header").count() == 1 and tab.locator("#results").count() == 0
    finally:
        context.close()


@sqlite_only
def test_back_from_an_applied_sweep_shows_the_dry_run_again_not_a_browser_error(page, hub):
    """The dry run was the answer to a POST: Back after applying the sweep showed the
    browser's "confirm form resubmission" error page (ERR_CACHE_MISS)."""
    scope = "repo:acme/sweep-back"
    hub.call(hub.store.write(scope, [
        __import__("tests.hub.conftest", fromlist=["fact"]).fact(STATUS_FACT)]))
    page.goto(f"{hub.url}/hub/scope?key={scope}")
    page.click("text=Sweep: dry run")
    assert STATUS_FACT in page.inner_text("table")
    page.click("text=Apply the sweep")
    assert "sweep is applied" in page.inner_text("[role=status]")
    answer = page.go_back()
    assert answer is not None and answer.status == 200
    assert "would retire 0 active facts" in page.inner_text("main")


@sqlite_only
def test_back_to_an_earlier_search_shows_its_brief_and_keeps_no_copy_of_the_page(logged_out,
                                                                                 hub):
    """Back after a second search showed the first one's results under an empty form (htmx
    restored its snapshot of the page, whose fields hold what the page was loaded with),
    and that snapshot, records' text and all, stayed in the tab's sessionStorage after
    logging out."""
    page = logged_out
    log_in(page, hub)  # a session of its own: it logs out
    page.goto(f"{hub.url}/hub/search")
    page.wait_for_function("window.htmx !== undefined")
    search(page, "api tests", "acme/api")
    search(page, "deploys on tuesdays", "")
    page.wait_for_url("**/hub/search?brief=deploys*")
    page.go_back()
    page.wait_for_url("**/hub/search?brief=api*")
    page.wait_for_selector("#results pre.preview")
    assert page.input_value("#brief") == "api tests"
    assert page.input_value("input[name=repo]") == "acme/api"
    assert LESSON in page.inner_text("#results")
    page.click("text=Log out")
    page.wait_for_url(f"{hub.url}/hub/login")
    kept = page.evaluate("JSON.stringify(Object.values(sessionStorage))")
    assert LESSON not in kept and "deploys" not in kept


@sqlite_only
def test_a_record_holding_a_long_url_keeps_its_page_on_a_narrow_screen(browser, signed_in,
                                                                       hub):
    """A record holding a long unbroken word (a URL, a token) made its record page and its
    forget page thousands of pixels wide: its text, outside the tables that wrap it, did not
    wrap (nor did a long run id on the runs page)."""
    scope = "repo:acme/long-url"
    url = "https://grafana.example.com/d/" + "a1b2c3" * 100
    hub.call(hub.store.write(scope, [fact(f"the dashboard is {url} (bookmarked)")]))
    record = next(iter(records_of(hub, scope).values()))
    context = browser.new_context(viewport={"width": 360, "height": 740},
                                  storage_state=signed_in)
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        run = "r-" + "a1b2c3" * 30
        for path, shown in ((f"/hub/record?id={record.id}", url),
                            (f"/hub/forget?id={record.id}", url), (f"/hub/run?run={run}", run)):
            page.goto(f"{hub.url}{path}")
            assert shown in page.inner_text("main")
            width = page.evaluate("document.documentElement.clientWidth")
            assert page.evaluate("document.documentElement.scrollWidth") <= width, path
    finally:
        context.close()


@sqlite_only
def test_a_search_of_a_blank_brief_says_so_where_the_results_go(page, hub):
    """A brief of spaces and line breaks passes the field's ``required``: the search
    emptied the results and said nothing, so the click seemed to do nothing."""
    page.goto(f"{hub.url}/hub/search")
    page.wait_for_function("window.htmx !== undefined")
    search(page, "api tests", "acme/api")
    page.fill("#brief", "  \n  ")
    page.click("text=Search and preview")
    alert = page.locator("#results [role=alert]")
    alert.wait_for()
    assert "brief is empty" in alert.inner_text()


@sqlite_only
def test_a_link_to_a_record_opened_logged_out_lands_on_the_record_after_login(logged_out,
                                                                              hub):
    """A link to a record (pasted in a chat, opened once the session had ended) went to the
    login page, and the login to the overview: the record the person meant to see was lost
    on the way. A ``next`` that is not one of the hub's pages is dropped."""
    page = logged_out
    record = records_of(hub, REPO)[LESSON]
    page.goto(f"{hub.url}/hub/record?id={record.id}")
    assert "/hub/login" in page.url
    page.fill("#token", "a mistyped token")  # a failed try keeps where it goes
    page.click("button[type=submit]")
    assert "not the hub token" in page.inner_text("main")
    page.fill("#token", HUB_TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(f"{hub.url}/hub/record?id={record.id}")
    assert page.inner_text("h1") == f"Record {record.id}"
    page.click("text=Log out")
    for elsewhere in ("https://evil.example/", "//evil.example/hub/", "/healthz"):
        page.goto(f"{hub.url}/hub/login?next={elsewhere}")
        page.fill("#token", HUB_TOKEN)
        page.click("button[type=submit]")
        page.wait_for_url(f"{hub.url}/hub/")
        page.click("text=Log out")
