"""First journey: a volunteer logs in, lands on office hours, switches to German."""

import re

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD, MemberFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_volunteer_logs_in_lands_on_office_hours_and_switches_to_german(page, login):
    UserFactory(username="vic", roles=["volunteer"])
    MemberFactory(
        user=UserFactory(username="m1", first_name="Fatima", last_name="Okafor", roles=["member"])
    )
    login("vic", PASSWORD)
    expect(page).to_have_url(re.compile(r"/office-hours/$"))
    expect(page.get_by_role("heading", name="Office hours")).to_be_visible()

    # Results as you type (htmx), from the keyboard only.
    expect(page.get_by_role("searchbox", name="Find a person")).to_be_focused()
    page.keyboard.type("okaf")
    expect(page.locator("#search-results")).to_contain_text("Fatima")

    page.get_by_label("Language").select_option("de")
    expect(page.get_by_role("heading", name="Sprechstunde")).to_be_visible()
    expect(page.locator("html")).to_have_attribute("lang", "de")
    expect(page.get_by_role("button", name=re.compile(r"^Abmelden \(vic\)$"))).to_be_visible()


def test_wrong_password_shows_the_error_in_the_browser(page, login):
    UserFactory(username="vic", roles=["volunteer"])
    login("vic", "wrong password")
    expect(page.locator("#login-errors")).to_be_visible()
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
