"""The web console in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright.

The pages are loaded with JavaScript disabled (the console needs none), from the daemon's endpoint serving real
tables' runs; a test fails when a page logs a console error (a Content-Security-Policy violation included). The
screenshots are kept under the test's temporary directory, and also written to ``$MAINTD_TEST_SCREENSHOTS``
when it is set (docs/img holds the ones docs/operations.md shows).

Without Chromium or Playwright the tests are skipped, unless ``MAINTD_TEST_REQUIRE_BROWSER=1`` (``.ci/run`` sets
it): then they fail, so CI never passes without them.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from maintd.service.console import Console
from maintd.service.http import HealthServer
from maintd.service.metrics import Metrics
from maintd.service.store import StateStore

from .console_fleet import HOSTILE_NAME, Fleet, make_fleet, settings_for

TOKEN = "browser-token-0123456789"


def chromium_executable() -> str | None:
    """``$MAINTD_CHROMIUM``, else Debian's ``chromium`` on the PATH."""
    return os.environ.get("MAINTD_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium_executable()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        executable = None
    if executable is None:
        message = "headless Chromium tests need Debian's chromium (apt-get install chromium) and playwright"
        if os.environ.get("MAINTD_TEST_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox cannot start; the pages are our own.
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp_path = tmp_path_factory.mktemp("console-browser")
    settings = settings_for(tmp_path, console_token=TOKEN)
    store = StateStore(settings.store.url)
    yield make_fleet(tmp_path, store, settings)
    store.close()


@pytest.fixture(scope="module")
def server(fleet: Fleet) -> Iterator[HealthServer]:
    with HealthServer(Metrics(), host="127.0.0.1", port=0, console=Console(fleet.store, fleet.settings,
                                                                           holder="replica-a")) as running:
        yield running


class Screens:
    """Where screenshots go: the test's directory, and ``$MAINTD_TEST_SCREENSHOTS`` when set."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.extra = Path(os.environ["MAINTD_TEST_SCREENSHOTS"]) if os.environ.get("MAINTD_TEST_SCREENSHOTS") else None

    def take(self, page: Any, name: str) -> Path:
        path = self.directory / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 1000
        if self.extra is not None:
            self.extra.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, self.extra / path.name)
        return path


@pytest.fixture
def page(browser: Any, server: HealthServer) -> Iterator[Any]:
    """A page without JavaScript, logged in with the token; every console error it logs fails the test."""
    context = browser.new_context(java_script_enabled=False, base_url=server.url,
                                  viewport={"width": 1400, "height": 900},
                                  http_credentials={"username": "operator", "password": TOKEN})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    yield opened
    context.close()
    assert errors == [], f"the console logged errors: {errors}"


def test_click_through_fleet_table_and_run_and_keep_screenshots(page: Any, fleet: Fleet, tmp_path: Path) -> None:
    screens = Screens(tmp_path)
    response = page.goto("/")
    assert response.status == 200 and page.title() == "Fleet · maintd"
    rows = page.locator("tbody").first.locator("tr")
    assert rows.count() == 3 and "broken" in rows.nth(0).inner_text()  # the unhealthiest first
    assert page.get_by_text(HOSTILE_NAME).count() == 1  # the name shown as text, not run
    assert page.get_by_role("columnheader", name="targets missed").count() == 1
    screens.take(page, "console-fleet")

    page.get_by_role("link", name="orders", exact=True).click()
    page.wait_for_url(re.compile(r"/table\?uri="))  # a click starts the navigation; wait until it is done
    assert page.title() == "Table orders · maintd"
    assert page.locator("svg").count() == 3 and page.locator("svg circle").count() >= 3
    assert page.get_by_text("explained bucket by bucket").count() == 1
    targets = page.locator("h2", has_text="Targets").locator("xpath=following-sibling::table[1]")
    assert targets.locator("tbody tr").count() == 2 and "+50% missed" in targets.inner_text()
    assert page.get_by_text("cheapest meeting <em>every</em> target", exact=False).count() == 1  # shown as text
    screens.take(page, "console-table")

    page.get_by_role("link", name=str(fleet.run_id), exact=True).first.click()
    page.wait_for_url(re.compile(r"/run\?id="))
    assert page.title() == f"Run {fleet.run_id} · maintd"
    assert page.locator("h2", has_text="Tasks").count() == 1 and page.get_by_text("bytes_written").count() == 1
    screens.take(page, "console-run")

    page.get_by_role("link", name="daemon", exact=True).click()
    page.wait_for_url(re.compile(r"/daemon$"))
    assert page.title().startswith("Daemon") and TOKEN not in page.content()
    screens.take(page, "console-daemon")


def test_the_filter_form_and_the_sort_links_work_without_javascript(page: Any) -> None:
    page.goto("/")
    page.fill("input[name=q]", "ord")
    page.get_by_role("button", name="show").click()
    page.wait_for_url(re.compile(r"q=ord"))
    assert page.locator("tbody").first.locator("tr").count() == 1
    page.goto("/")
    page.get_by_role("link", name="table").first.click()  # order by name
    page.wait_for_url(re.compile(r"sort=name"))
    names = page.locator("tbody").first.locator("tr td:first-child a").all_inner_texts()
    assert names == sorted(names) and len(names) == 3


def test_without_credentials_the_browser_gets_401(browser: Any, server: HealthServer) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        response = context.request.get(server.url + "/")
        assert response.status == 401 and response.headers["www-authenticate"].startswith("Basic")
        assert "orders" not in response.text()
    finally:
        context.close()
