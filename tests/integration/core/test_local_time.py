"""Everything a person reads is in the portal's time zone (settings.TIME_ZONE, Europe/Berlin),
named where a reader could take it for another zone; datetime-local inputs are prefilled and
read in that zone."""

from __future__ import annotations

import datetime as dt
import re
import time
import zoneinfo

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from apps.audit.services import audit_record
from apps.firewall.models import FirewallHost
from apps.health.models import HostHealthSample
from apps.tickets.models import Incident
from apps.tickets.status import status_cache_clear
from tests.factories import MemberFactory, UserFactory

pytestmark = pytest.mark.django_db
UTC = dt.UTC


@pytest.fixture(autouse=True)
def _no_cached_status_page():
    status_cache_clear()
    yield
    status_cache_clear()


def support() -> Client:
    client = Client()
    client.force_login(UserFactory(roles=["support"]))
    return client


def declare(client: Client, started_at: str, **extra: str) -> Incident:
    data = {"title": "Building B offline", "severity": "major", "public": "on"}
    response = client.post(
        reverse("tickets:incident_list"), {**data, "started_at": started_at, **extra}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    return Incident.objects.get()


@pytest.mark.parametrize(
    ("typed", "utc", "reads"),
    [
        (
            "2025-01-15T21:12",
            dt.datetime(2025, 1, 15, 20, 12, tzinfo=UTC),
            "9:12\u00a0p.m.\u00a0CET",
        ),
        (
            "2025-07-15T21:12",
            dt.datetime(2025, 7, 15, 19, 12, tzinfo=UTC),
            "9:12\u00a0p.m.\u00a0CEST",
        ),
    ],
)
def test_an_incident_started_at_a_local_time_reads_that_time_everywhere(
    settings, typed, utc, reads
):
    assert settings.TIME_ZONE == "Europe/Berlin"
    client = support()
    incident = declare(client, typed, description="We are looking into it.")
    assert incident.started_at == utc  # the form reads the browser's value in local time
    status = Client().get(reverse("tickets:status_page")).content.decode()
    assert f"since {typed[5:7]}/{typed[8:10]}/{typed[:4]} {reads}" in status
    detail = client.get(reverse("tickets:incident_detail", args=[incident.pk])).content.decode()
    assert f"since {typed[5:7]}/{typed[8:10]}/{typed[:4]} {reads}" in detail
    listing = client.get(reverse("tickets:incident_list")).content.decode()
    assert reads in listing


def test_the_prefilled_start_is_now_on_the_portal_clock_and_matches_the_first_update():
    """Declared with the prefilled start, the incident reads "since 21:12" beside its own first
    update at 21:12 (before: the start was prefilled an hour early, which read as UTC)."""
    if timezone.localtime().second > 50:  # GET, POST and render within one minute
        time.sleep(11)
    client = support()
    before = timezone.localtime()
    form = client.get(reverse("tickets:incident_list")).content.decode()
    prefilled = re.search(r'name="started_at" value="([^"]+)"', form).group(1)
    assert prefilled == before.strftime("%Y-%m-%dT%H:%M")
    assert "Local time, CET (Europe/Berlin)" in form or "Local time, CEST (Europe/Berlin)" in form
    incident = declare(client, prefilled, description="We are looking into it.")
    update = incident.updates.get()
    assert timezone.localtime(update.created_at).strftime("%H:%M") == prefilled[-5:]
    status = Client().get(reverse("tickets:status_page")).content.decode()
    since = re.search(r"since ([^<\n]+)", status).group(1).strip()
    posted = re.search(r"<time [^>]*>([^<]+)</time>", status).group(1)
    assert since == posted
    assert since.endswith(("CET", "CEST"))


def test_the_audit_trail_reads_in_local_time_with_the_zone_named():
    member = MemberFactory()
    staff = UserFactory(roles=["volunteer"])
    audit_record(
        actor=staff,
        action="ipv4.quarantine",
        obj=member,
        member=member,
        changes={"quarantined_until": [None, "2025-01-15T20:12:00+00:00"]},
    )
    client = Client()
    client.force_login(staff)
    page = client.get(reverse("members:member_detail", args=[member.pk])).content.decode()
    trail = page.split('id="audit-trail"')[1]
    assert "01/15/2025 9:12\u00a0p.m.\u00a0CET" in trail  # time and zone on one line
    assert "20:12:00+00:00" not in trail
    written = timezone.localtime().tzname()
    assert re.search(rf"<time [^>]*>[^<]+\u00a0{written}</time>", trail)


def test_health_charts_draw_times_in_the_portal_zone_and_say_which(client_for):
    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    HostHealthSample.objects.create(host=host, reachable=True, latency_ms=12)
    page = client_for("volunteer").get(reverse("firewall:host_detail", args=[host.name]))
    body = page.content.decode()
    assert '"tz": "Europe/Berlin"' in body  # charts.js hands it to uPlot's tzDate
    zone = zoneinfo.ZoneInfo("Europe/Berlin")
    assert f"Times on the charts are in {dt.datetime.now(zone).tzname()} (Europe/Berlin)." in body
