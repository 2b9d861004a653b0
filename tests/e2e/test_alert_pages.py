"""The pages an alert changes, in Chromium at 390 and 1280 px, in English and German: the incident
page (the alert behind it, the signals around the start, "Not an outage" and the edit form by
keyboard), the Firewalls page's warnings, the status page and a resident's banner."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest
from django.utils import timezone

from apps.alerts.payload import alerts_parse
from apps.alerts.services import alerts_receive
from apps.firewall.models import FirewallHost, Site
from apps.health.models import HostHealthSample
from apps.tickets.models import Incident
from apps.tickets.status import status_cache_clear
from tests.factories import PASSWORD, BuildingFactory, MemberFactory, RoomFactory, UserFactory
from tests.integration.alerts.conftest import alert, message

pytestmark = pytest.mark.django_db(transaction=True)
SHOTS = Path(os.environ.get("PORTAL_SCREENSHOTS", "/nonexistent"))


@pytest.fixture
def outage():
    site = Site.objects.create(name="north")
    house = BuildingFactory(code="N1", name="North 1")
    site.buildings.set([house])
    start = timezone.now() - dt.timedelta(minutes=3)
    for n in (1, 2):
        host = FirewallHost.objects.create(name=f"fw-n{n}", address=f"10.255.255.4{n}", site=site)
        HostHealthSample.objects.create(
            host=host, at=start - dt.timedelta(minutes=1), reachable=True,
            softirq_per_cpu=[0.4, 0.97], conntrack_count=250000, conntrack_max=262144,
            ha={"instances": {"ipv4": {"state": "MASTER" if n == 1 else "BACKUP"}}},
        )  # fmt: skip
        HostHealthSample.objects.create(host=host, at=start, reachable=False)
    body = message(
        alert("FirewallPairUnreachable", site="north", starts_at=start),
        alert("StateSyncLosingMessages", host="fw-n2", summary="conntrackd on fw-n2 keeps losing sync messages"),
    )  # fmt: skip
    alerts_receive(alerts=alerts_parse(json.dumps(body).encode()))
    UserFactory(username="ada", roles=["admin"])
    MemberFactory(
        user=UserFactory(username="rita", roles=["member"]), room=RoomFactory(building=house)
    )
    status_cache_clear()
    return Incident.objects.get()


def log_in(page, username: str) -> None:
    page.goto("/accounts/login/")
    page.locator("input[name=username]").fill(username)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("form button[type=submit]").last.click()


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize("locale", ["en-GB", "de-DE"])
def test_alert_pages_fit_read_and_work_by_keyboard(browser, live_server, outage, width, locale):
    german = locale.startswith("de")
    context = browser.new_context(
        base_url=live_server.url, locale=locale, viewport={"width": width, "height": 900}
    )
    page = context.new_page()
    log_in(page, "ada")
    pages = {"incident": f"/support/incidents/{outage.pk}/", "firewalls": "/firewalls/",
             "status": "/status/"}  # fmt: skip
    for name, path in pages.items():
        page.goto(path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} at {width}px is {overflow}px too wide"
        if SHOTS.is_dir():
            page.screenshot(path=str(SHOTS / f"alerts-{name}-{locale}-{width}.png"), full_page=True)
    page.goto(pages["incident"])
    alerts = page.get_by_test_id("incident-alerts").inner_text()
    assert ("Von der Überwachung eröffnet" if german else "Opened by the monitoring") in alerts
    signals = page.get_by_test_id("incident-signals").inner_text()
    assert "97%" in signals
    assert "MASTER →" in signals
    # "Not an outage" is a real button, reached by keyboard from the alert list.
    button = page.get_by_role("button", name="Keine Störung" if german else "Not an outage")
    button.focus()
    assert page.evaluate("document.activeElement.textContent").strip() == button.inner_text()
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.dataset.testid") == "not-outage"
    page.goto(pages["firewalls"])
    warnings = page.get_by_test_id("firewall-warnings").inner_text()
    expected = "Zustandsabgleich verliert Nachrichten" if german else "state sync losing messages"
    assert expected in warnings
    page.goto(pages["status"])
    title = (
        "Die Firewalls von North 1 antworten nicht"
        if german
        else "The firewalls of North 1 do not answer"
    )
    assert title in page.get_by_test_id("current-incident").inner_text()
    assert "losing" not in page.content()  # warnings never reach the public
    context.close()
    # A resident of the building sees the banner, in their language.
    resident = browser.new_context(
        base_url=live_server.url, locale=locale, viewport={"width": width, "height": 900}
    )
    page = resident.new_page()
    log_in(page, "rita")
    page.goto("/")
    assert title in page.content()
    if SHOTS.is_dir():
        page.screenshot(path=str(SHOTS / f"alerts-banner-{locale}-{width}.png"), full_page=False)
    resident.close()
