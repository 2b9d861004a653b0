"""Journeys: a volunteer checks in a pending member and registers a device for them; a resident
adds a device. Keyboard first, in the real browser."""

import re

import pytest
from playwright.sync_api import expect

from apps.members.choices import MemberStatus
from apps.members.models import Member
from apps.network.models import Device
from tests.factories import PASSWORD, MemberFactory, UserFactory, member_active, pool_create

pytestmark = pytest.mark.django_db(transaction=True)


def test_volunteer_checks_in_a_pending_member_and_registers_a_device(page, login):
    pool_create()
    UserFactory(username="vic", roles=["volunteer"])
    member = MemberFactory(
        user=UserFactory(first_name="Fatima", last_name="Okafor", roles=["member"])
    )
    login("vic", PASSWORD)
    expect(page).to_have_url(re.compile(r"/office-hours/$"))
    queue = page.locator("#pending-queue")
    expect(queue).to_contain_text("Fatima Okafor")

    # Find her by room, from the keyboard, and open her page.
    page.keyboard.type(member.room.label)
    results = page.locator("#search-results")
    expect(results).to_contain_text("Fatima Okafor")
    results.get_by_role("link", name="Fatima Okafor").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", level=1)).to_contain_text("Fatima Okafor")

    # Check-in is a step: the consequence, then "identity checked" (the server insists).
    page.get_by_test_id("check-in-open").click()
    expect(page.locator("#check-in")).to_contain_text("a public IPv4 address and full speed")
    page.get_by_test_id("check-in").click()
    expect(page.locator(".messages")).to_contain_text("Tick “Identity checked”")
    page.get_by_label("Identity checked").check()
    page.get_by_test_id("check-in").click()
    expect(page.locator(".messages")).to_contain_text("checked in")
    public = page.get_by_test_id("public-ipv4")
    expect(public).to_have_text("198.51.100.1")

    # Register her laptop; the MAC as printed on a label, with dashes.
    devices = page.locator("#devices")
    devices.get_by_label("Device name").fill("Laptop")
    devices.get_by_label("MAC address").fill("3C-22-FB-12-34-56")
    devices.get_by_label("MAC address").press("Enter")
    expect(devices).to_contain_text("3c:22:fb:12:34:56")
    expect(devices.locator(".notice")).to_contain_text("Laptop")
    member.refresh_from_db()
    assert member.status == MemberStatus.ACTIVE
    assert Device.objects.get(member=member).mac == "3c:22:fb:12:34:56"

    # A refusal shows next to the field.
    devices.get_by_label("Device name").fill("Phone")
    devices.get_by_label("MAC address").fill("01:00:5e:00:00:01")
    devices.get_by_role("button", name="Add device").click()
    expect(devices.locator("#add-mac-error")).to_contain_text("multicast")
    expect(page.locator("#audit-trail")).to_contain_text("checked in")


def test_resident_adds_renames_and_removes_a_device(page, login):
    user = UserFactory(username="rita", roles=["member"])
    member = member_active(user=user)
    login("rita", PASSWORD)
    expect(page).to_have_url(re.compile(r"/me/$"))
    expect(page.get_by_test_id("public-ipv4")).to_have_text(member.public_ipv4.address)
    devices = page.locator("#devices")
    expect(devices).to_contain_text("No devices yet")

    devices.get_by_label("Device name").fill("Phone")
    devices.get_by_label("MAC address").fill("aabb.ccdd.ee01")
    devices.get_by_role("button", name="Add device").click()
    expect(devices.locator("tbody")).to_contain_text("aa:bb:cc:dd:ee:01")
    device = Device.objects.get(member=member)
    expect(devices.locator("tbody")).to_contain_text(device.ipv4)

    devices.get_by_role("button", name="Change Phone").click()
    edit = devices.locator("tr.editing")
    edit.get_by_label("Device name").fill("My phone")
    edit.get_by_label("Device name").press("Enter")
    expect(devices.locator("tbody")).to_contain_text("My phone")

    page.once("dialog", lambda dialog: dialog.accept())
    devices.get_by_role("button", name="Remove My phone").click()
    expect(devices).to_contain_text("No devices yet")
    assert not Member.objects.get(pk=member.pk).devices.exists()


def test_suspend_asks_first_naming_the_consequence(page, login):
    pool_create()
    UserFactory(username="vic", roles=["volunteer"])
    member = member_active()
    login("vic", PASSWORD)
    page.goto(f"/office-hours/members/{member.pk}/")
    page.get_by_text("Suspend", exact=True).first.click()
    page.get_by_label("Reason").fill("unpaid fee")
    asked: list[str] = []

    def answer(dialog, accept: bool) -> None:
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.once("dialog", lambda d: answer(d, False))
    page.get_by_role("button", name="Suspend", exact=True).click()
    expect(page.get_by_role("button", name="Suspend", exact=True)).to_be_visible()
    assert "cut off all of their devices" in asked[0]
    member.refresh_from_db()
    assert member.status == MemberStatus.ACTIVE  # dismissed: nothing sent
    page.once("dialog", lambda d: answer(d, True))
    page.get_by_role("button", name="Suspend", exact=True).click()
    expect(page.locator(".messages")).to_contain_text("is suspended")
    member.refresh_from_db()
    assert member.status == MemberStatus.SUSPENDED


def test_granting_and_extending_a_test_access_refreshes_the_panel_in_place(page, login):
    import datetime as dt

    from django.utils import timezone

    from apps.network.models import ShapingProfile

    pool_create()
    ShapingProfile.default()
    UserFactory(username="vic", roles=["volunteer"])
    member = MemberFactory()
    login("vic", PASSWORD)
    page.goto(f"/office-hours/members/{member.pk}/")
    panel = page.locator("#test-access")
    panel.get_by_text("Grant a test access").click()
    panel.get_by_label("Test access until").fill(timezone.localdate().isoformat())
    panel.get_by_role("button", name="Grant test access").click()
    expect(panel.locator("#grant-until-error")).to_be_visible()
    until = timezone.localdate() + dt.timedelta(days=5)
    panel.get_by_label("Test access until").fill(until.isoformat())
    panel.get_by_role("button", name="Grant test access").click()
    shown = until.strftime("%m/%d/%Y")
    notice = panel.get_by_test_id("test-access-notice")
    expect(notice).to_have_text(f"Test access granted until {shown} (last day).")
    expect(panel.locator("#grant-until-error")).to_have_count(0)  # the old error is gone
    expect(panel.get_by_test_id("test-access-facts")).to_contain_text(shown)
    expect(page.locator("#member-status")).to_contain_text("Test access")  # out of band
    expect(page.locator("#member-facts")).to_contain_text(shown)
    expect(page.locator("#audit-trail")).to_contain_text("a test access until")

    later = until + dt.timedelta(days=7)
    panel.get_by_text("Extend the test access").click()
    panel.get_by_label("Test access until").fill(later.isoformat())
    panel.get_by_role("button", name="Extend").click()
    expect(notice).to_have_text(
        f"Test access extended until {later.strftime('%m/%d/%Y')} (last day)."
    )
    expect(panel.get_by_test_id("test-access-facts")).not_to_contain_text(shown)
    member.refresh_from_db()
    assert member.test_access_until == later


def test_granting_a_test_access_refreshes_the_actions_addresses_and_devices(page, login):
    """Issue 25: after "Grant test access" the Actions section (Suspend is now possible), the
    public address and the device table (its devices now reach the firewalls: a State column)
    are those of a member on test, without a reload."""
    import datetime as dt

    from django.utils import timezone

    from apps.network.models import ShapingProfile
    from tests.factories import device_add

    pool_create()
    ShapingProfile.default()
    UserFactory(username="vic", roles=["volunteer"])
    member = MemberFactory()
    device_add(member, name="laptop")
    login("vic", PASSWORD)
    page.goto(f"/office-hours/members/{member.pk}/")
    actions = page.locator("#member-actions")
    expect(actions).to_be_visible()
    suspend = actions.locator("summary").get_by_text("Suspend", exact=True)
    expect(suspend).to_have_count(0)
    devices = page.locator("#devices")
    expect(devices.get_by_role("columnheader", name="State")).to_have_count(0)
    expect(page.get_by_test_id("public-ipv4")).to_have_count(0)

    panel = page.locator("#test-access")
    panel.get_by_text("Grant a test access").click()
    until = timezone.localdate() + dt.timedelta(days=5)
    panel.get_by_label("Test access until").fill(until.isoformat())
    panel.get_by_role("button", name="Grant test access").click()
    expect(panel.get_by_test_id("test-access-notice")).to_be_visible()
    expect(suspend).to_be_visible()
    expect(devices.get_by_role("columnheader", name="State")).to_be_visible()
    expect(devices.locator("[data-testid=live-state]")).to_have_count(1)
    expect(page.get_by_test_id("public-ipv4")).to_be_visible()
