"""The abuse desk in Chromium: a complaint names an address and a time; the answer appears in
place (htmx, no reload) with the member, the device and the evidence, and fits a phone."""

import re

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD, UserFactory, device_add, member_active

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_abuse_desk_looks_up_who_held_a_public_address(page, login):
    member = member_active(
        user=UserFactory(username="m1", first_name="Fatima", last_name="Okafor", roles=["member"])
    )
    device_add(member, "laptop-with-a-long-name")
    UserFactory(username="desk", roles=["abuse"])
    page.set_viewport_size({"width": 390, "height": 900})
    login("desk", PASSWORD)
    page.get_by_role("link", name="Abuse lookup").click()
    expect(page.get_by_role("heading", name="Abuse lookup")).to_be_visible()

    page.get_by_label("Address").fill(member.public_ipv4.address)
    page.get_by_label("Point in time").fill("1999-01-01 00:00")
    page.get_by_role("button", name="Look up").click()
    expect(page.locator("#id_reason-error")).to_contain_text("Say why you look this up")

    page.evaluate("window.notReloaded = true")
    when = page.evaluate("new Date().toISOString()")
    page.get_by_label("Point in time").fill(when)
    page.get_by_label("Reason").fill("Complaint CERT-2026-0042")
    page.get_by_role("button", name="Look up").click()
    answer = page.get_by_test_id("abuse-answer")
    expect(answer).to_have_attribute("data-verdict", "held")
    expect(answer).to_contain_text("Fatima Okafor")
    expect(answer).to_contain_text("laptop-with-a-long-name")
    expect(answer).to_contain_text(re.compile(r"lookup|Lookup"))
    assert page.evaluate("window.notReloaded") is True
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
