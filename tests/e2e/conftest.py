"""Playwright with Debian's Chromium against pytest-django's live_server."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def browser():
    assert Path(CHROMIUM).exists(), "Debian's chromium is installed by `make test`"
    # Playwright's sync API keeps an event loop running in this thread while it is open; the
    # ORM calls of the tests (and the database flush after each) are still synchronous.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=30000
            )
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser, live_server, request):
    context = browser.new_context(
        base_url=live_server.url, locale="en-GB", viewport={"width": 1280, "height": 900}
    )
    context.set_default_timeout(10000)
    page = context.new_page()
    yield page
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    context.close()


@pytest.fixture
def login(page):
    """Log in through the real form."""

    def do(username: str, password: str) -> None:
        page.goto("/accounts/login/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Log in").click()

    return do


def staff_context(browser, base_url: str, *, username: str, locale: str, width: int):
    """A browser context at `width` px in `locale`, logged in through the real form as
    `username` (password tests.factories.PASSWORD); returns (context, page)."""
    from tests.factories import PASSWORD

    context = browser.new_context(
        base_url=base_url, locale=locale, viewport={"width": width, "height": 900}
    )
    page = context.new_page()
    page.goto("/accounts/login/")
    page.locator("input[name=username]").fill(username)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("form button[type=submit]").last.click()
    return context, page
