"""Issue 25: at 390 px the residents' devices, forwards and openings tables and the firewall list
scrolled inside themselves with no hint, hiding the State and action columns and a host's
Failover and Warnings. Now each row is a card on a phone: every cell on screen, labelled, the
host's warnings and failover first; at 1280 px they stay tables."""

from __future__ import annotations

import pytest

from apps.firewall.models import FirewallHost
from apps.health.models import HostHealthSample
from tests.factories import (
    PASSWORD,
    UserFactory,
    device_add,
    forward_add,
    member_active,
    opening_add,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def data():
    member = member_active()
    member.user.username = "rita"
    member.user.set_password(PASSWORD)
    member.user.save()
    device = device_add(member, "laptop-with-a-long-name")
    forward_add(member, device, "27015-27020")
    opening_add(device, "22")
    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    HostHealthSample.objects.create(
        host=host,
        reachable=True,
        ha={"instances": {"ipv4": {"state": "FAULT"}}, "operator_priority": {"ipv4": -254}},
    )
    UserFactory(username="vic", roles=["volunteer"])
    return member


def open_as(browser, live_server, user, width, language="en-GB"):
    context = browser.new_context(
        base_url=live_server.url, locale=language, viewport={"width": width, "height": 900}
    )
    context.set_default_timeout(10000)
    page = context.new_page()
    page.goto("/accounts/login/")
    page.locator("#id_username").fill(user)
    page.locator("#id_password").fill(PASSWORD)
    page.locator("form button[type=submit]").first.click()
    page.wait_for_load_state()
    return context, page


def on_screen(page, locator) -> None:
    """The element is visible and lies inside the viewport's width (no sideways scrolling)."""
    locator.scroll_into_view_if_needed()
    box = locator.bounding_box()
    assert box is not None
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= page.viewport_size["width"] + 1, box


@pytest.mark.parametrize("language", ["en-GB", "de-DE"])
def test_a_residents_rows_show_state_and_actions_on_a_phone(browser, live_server, data, language):
    context, page = open_as(browser, live_server, "rita", 390, language)
    page.goto("/me/")
    for table in ("#devices table", "[data-testid=forwards-table]", "[data-testid=openings-table]"):
        row = page.locator(f"{table} tbody tr:has(td)").first
        on_screen(page, row.locator("[data-testid=live-state]"))
        on_screen(page, row.locator("td.row-actions button, td.row-actions a").last)
    state = page.locator("#devices table tbody tr td[data-label]").last
    label = page.evaluate("e => getComputedStyle(e, '::before').content", state.element_handle())
    assert label == ('"Zustand: "' if language == "de-DE" else '"State: "')
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    context.close()


def test_the_firewall_list_shows_warnings_and_failover_first_on_a_phone(browser, live_server, data):
    context, page = open_as(browser, live_server, "vic", 390)
    page.goto("/firewalls/")
    warnings = page.get_by_test_id("warnings-pl-nat1")
    failover = page.get_by_test_id("roles-pl-nat1")
    on_screen(page, warnings)
    on_screen(page, failover)
    assert "priority failover" in warnings.inner_text()
    version = page.locator("[data-testid=hosts-table] td.col-version").first
    # What matters first: warnings, then failover, above the version and the counters.
    assert warnings.bounding_box()["y"] < failover.bounding_box()["y"]
    assert failover.bounding_box()["y"] < version.bounding_box()["y"]
    context.close()


def test_office_hours_results_are_cards_on_a_phone(browser, live_server, data):
    context, page = open_as(browser, live_server, "vic", 390)
    page.goto(f"/office-hours/?q={data.room.label}")
    row = page.locator("#search-results tbody tr").first
    on_screen(page, row.locator("td[data-label]").last)  # the public IPv4
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    context.close()


def test_at_desktop_width_they_stay_tables(browser, live_server, data):
    context, page = open_as(browser, live_server, "vic", 1280)
    page.goto("/firewalls/")
    header = page.locator("[data-testid=hosts-table] thead th").first
    assert header.is_visible()
    assert (
        page.evaluate(
            "getComputedStyle(document.querySelector('[data-testid=hosts-table] tr')).display"
        )
        == "table-row"
    )
    context.close()
