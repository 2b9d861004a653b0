"""A volunteer sets up the second step, logs out and logs in again with a code from the app."""

import re
from base64 import b32decode

import pytest
from django_otp.plugins.otp_totp.models import TOTPDevice
from playwright.sync_api import expect

from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def app_code(secret: str, step: int = 0) -> str:
    """What an authenticator app shows for the key typed from the page (`step` 30 s later)."""
    from django_otp.oath import totp

    return f"{totp(b32decode(secret.replace(' ', '')), drift=step):06d}"


def test_volunteer_enrols_logs_out_and_logs_in_with_a_code(page, login, staff_2fa):
    UserFactory(username="vic", roles=["volunteer"])
    login("vic", PASSWORD)

    # Staff without an authenticator go to enrolment first: QR code and the key as text.
    expect(page.get_by_role("heading", name="Set up the second step")).to_be_visible()
    expect(page.get_by_test_id("totp-qr").locator("svg")).to_be_visible()
    expect(page.get_by_role("link", name="Office hours")).to_have_count(0)
    secret = page.get_by_test_id("totp-secret").inner_text()
    page.get_by_label("Code from the app").fill(app_code(secret))
    page.get_by_role("button", name="Turn on").click()

    # Ten recovery codes, shown once; then on to the page the login was for.
    expect(page.get_by_role("heading", name="Your recovery codes")).to_be_visible()
    expect(page.get_by_test_id("recovery-codes").locator("li")).to_have_count(10)
    page.get_by_role("button", name="I have kept them").click()
    expect(page).to_have_url(re.compile(r"/office-hours/$"))
    assert TOTPDevice.objects.get(user__username="vic").confirmed

    page.get_by_test_id("logout").click()
    login("vic", PASSWORD)
    expect(page.get_by_role("heading", name="Second step")).to_be_visible()
    page.get_by_label("Code").fill("000000" if app_code(secret, 1) != "000000" else "111111")
    page.get_by_role("button", name="Confirm").click()
    expect(page.get_by_role("alert")).to_contain_text("This code is wrong")

    # The code the app shows next (the one used for enrolment cannot be used twice).
    page.get_by_label("Code").fill(app_code(secret, 1))
    page.get_by_role("button", name="Confirm").click()
    expect(page).to_have_url(re.compile(r"/office-hours/$"))
    expect(page.get_by_role("heading", name="Office hours")).to_be_visible()
