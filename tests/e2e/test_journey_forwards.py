"""Journey: a resident adds a port forward, sees the conflict next to the field when adding an
overlapping one, and disables the first; then opens IPv6 ports. Keyboard first, real browser."""

import pytest
from playwright.sync_api import expect

from apps.network.models import Ipv6Opening, PortForward
from tests.factories import PASSWORD, UserFactory, device_add, member_active

pytestmark = pytest.mark.django_db(transaction=True)


def test_resident_adds_a_forward_sees_the_conflict_and_disables_it(page, login):
    member = member_active(user=UserFactory(username="rita", roles=["member"]))
    device_add(member, name="Gameserver")
    device_add(member, name="Laptop")
    login("rita", PASSWORD)
    page.goto("/me/")
    forwards = page.locator("#port-forwards")
    expect(forwards).to_contain_text("No port forwards yet")

    form = forwards.locator("form.add-forward")
    form.get_by_label("Device", exact=True).select_option(label="Gameserver")
    form.get_by_label("Protocol", exact=True).select_option("both")
    form.get_by_label("Public port(s)").fill("27015 - 27020")
    form.get_by_label("Public port(s)").press("Enter")
    expect(forwards.locator(".notice")).to_contain_text("27015-27020")
    row = forwards.get_by_test_id("forward-row")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("TCP and UDP")
    expect(row.get_by_test_id("live-state")).to_contain_text("pending")

    # An overlapping one on another device: refused, the message next to the field.
    form = forwards.locator("form.add-forward")
    form.get_by_label("Device", exact=True).select_option(label="Laptop")
    form.get_by_label("Protocol", exact=True).select_option("udp")
    form.get_by_label("Public port(s)").fill("27020")
    form.get_by_role("button", name="Add forward").click()
    error = forwards.locator("#forward-add-public_ports-error")
    expect(error).to_contain_text("27015-27020 → Gameserver")
    expect(forwards.locator("#forward-add-public_ports")).to_have_attribute("aria-invalid", "true")
    assert PortForward.objects.count() == 1

    # Disable the first one from the keyboard.
    forwards.get_by_role("button", name="Disable forward TCP and UDP 27015-27020").focus()
    page.keyboard.press("Enter")
    expect(forwards.locator(".notice")).to_contain_text("Forward disabled.")
    expect(forwards.get_by_test_id("forward-row")).to_contain_text("disabled")
    expect(
        forwards.get_by_role("button", name="Enable forward TCP and UDP 27015-27020")
    ).to_be_visible()
    assert PortForward.objects.get().enabled is False

    # IPv6: open all ports of the laptop.
    openings = page.locator("#ipv6-openings")
    form = openings.locator("form.add-opening")
    form.get_by_label("Device", exact=True).select_option(label="Laptop")
    form.get_by_label("Protocol", exact=True).select_option("both")
    form.get_by_role("button", name="Add opening").click()
    expect(openings.get_by_test_id("opening-row")).to_contain_text("all ports")
    assert Ipv6Opening.objects.get().all_ports
