"""A session that ends while a page polls (the system page refreshes every 5 s): the browser
goes once to the login page, with the page it was on as `next`; no login form lands inside the
polled box."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_lost_session_leads_once_to_the_login_page(django_db_setup, page, login):
    UserFactory(username="ada", roles=["admin"])
    login("ada", PASSWORD)
    page.goto("/system/")
    expect(page.locator("#celery-status")).to_be_visible()
    page.context.clear_cookies()  # the session ends (expired, or logged out elsewhere)
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=%2Fsystem%2F$"), timeout=15000)
    expect(page.locator("form[action='/accounts/login/']")).to_have_count(1)
    page.get_by_label("Username").fill("ada")  # signing in again leads back to the page
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/system/$"))
    expect(page.locator("#celery-status")).to_be_visible()
