"""Every page type fits a 390 px phone without sideways scrolling (tables scroll in their own
box, the navigation wraps); the same pages at 1280 px do not overflow either."""

from __future__ import annotations

import pytest

from apps.firewall.models import FirewallHost
from apps.notifications.choices import NoticeKind
from apps.notifications.services import notice_create
from apps.traffic.services import Row, traffic_store
from tests.factories import (
    PASSWORD,
    UserFactory,
    device_add,
    forward_add,
    member_active,
    opening_add,
)

pytestmark = pytest.mark.django_db(transaction=True)

OVERFLOW = "document.documentElement.scrollWidth - window.innerWidth"


@pytest.fixture
def data():
    member = member_active()
    member.user.username = "rita"
    member.user.set_password(PASSWORD)
    member.user.save()
    for name in ("laptop-with-a-long-name", "tv", "console"):
        device = device_add(member, name)
    forward_add(member, device, "27015-27020")
    opening_add(device, "22")
    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    traffic_store(host=host, epoch="e", rows=[Row("acct4_in", str(device.ipv4), 9, 7_654_321)])
    # The "Test" buttons of forwards and openings show when a probe host is configured.
    from apps.network.models import NetworkSettings

    NetworkSettings.objects.update_or_create(id=1, defaults={"probe_address": "10.255.255.13"})
    notice_create(
        member=member,
        kind=NoticeKind.INCIDENT,
        params={
            "title": "Uplink of house A-North and the whole east wing down since this morning",
            "buildings": ["A-North", "A-East"],
            "started_at": "2026-11-25T09:30:00+01:00",
        },
    )
    for username, role in (("vic", "volunteer"), ("sue", "support"), ("ada", "admin")):
        UserFactory(username=username, roles=[role])
    return member


PAGES = {
    None: ["/accounts/login/", "/accounts/password_reset/", "/signup/", "/status/"],
    "rita": [
        "/me/",
        "/tickets/",
        "/me/notices/",
        "/me/notices/preferences/",
        "/accounts/two-factor/",
        "/accounts/two-factor/setup/",
    ],
    "vic": [
        "/office-hours/",
        "/office-hours/members/{member}/",
        "/firewalls/",
        "/firewalls/pl-nat1/",
        "/traffic/top/",
    ],
    "sue": [
        "/support/tickets/",
        "/support/incidents/",
        "/support/incidents/{incident}/",
        "/support/stats/",
    ],
    "ada": ["/system/"],
}


@pytest.mark.parametrize("width", [390, 1280])
def test_no_page_scrolls_sideways(django_db_setup, browser, live_server, data, width):
    from apps.tickets.services import incident_declare, ticket_open

    # A long title, as real ones are: the inbox's incident filter lists it (a <select> takes
    # its longest option's width: the inbox was 457 px wide at 390 px).
    incident = incident_declare(
        actor=data.user,
        title="Uplink of house A-North and the whole east wing down since this morning",
        keywords=["offline"],
    )
    ticket_open(actor=data.user, subject="offline since this morning", body="No internet")
    too_wide = []
    for user, paths in PAGES.items():
        context = browser.new_context(
            base_url=live_server.url, locale="en-GB", viewport={"width": width, "height": 900}
        )
        page = context.new_page()
        if user:
            page.goto("/accounts/login/")
            page.get_by_label("Username").fill(user)
            page.get_by_label("Password").fill(PASSWORD)
            page.get_by_role("button", name="Log in").click()
            page.wait_for_load_state()
        for path in paths:
            url = path.format(member=data.pk, incident=incident.pk)
            response = page.goto(url)
            # The page itself, not a 403/404/500 or the login form in its place.
            assert response is not None
            assert response.status == 200, f"{url} as {user}"
            assert page.url.endswith(url), f"{url} as {user} went to {page.url}"
            heading = page.locator("main h1").first
            assert heading.is_visible(), f"{url} as {user}: no heading"
            assert heading.inner_text().strip(), f"{url} as {user}: an empty heading"
            overflow = page.evaluate(OVERFLOW)
            if overflow > 0:
                too_wide.append(f"{path} as {user}: {overflow} px too wide")
        context.close()
    assert too_wide == []
