"""The firewall pages with a pair failed over, quota hits and conntrack drops, as staff see them
in Chromium: at 390 and 1280 px, in English and German, nothing scrolls sideways, the roles and
warnings read as sentences, and the resync action is reachable by keyboard."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from apps.firewall.models import FirewallHost, Site
from apps.health.models import HostHealthSample
from apps.tickets.status import status_cache_clear
from tests.e2e.conftest import staff_context
from tests.factories import UserFactory, device_add, member_active

pytestmark = pytest.mark.django_db(transaction=True)
SHOTS = Path(os.environ.get("PORTAL_SCREENSHOTS", "/nonexistent"))


@pytest.fixture
def pair():
    Site.objects.filter(pk=Site.default_pk()).update(
        virtual_addresses="member 10.100.0.1/16\nuplink 203.0.113.1/24"
    )
    member = member_active()
    device_add(member, "seedbox")
    hosts = [
        FirewallHost.objects.create(
            name=f"pl-nat{n}", address=f"10.255.255.1{n}", rollout_order=n,
            sync_interface="pl-sync", sync_address4=f"10.255.254.{n}",
        )
        for n in (1, 2)
    ]  # fmt: skip
    since = (timezone.now() - timedelta(minutes=12)).isoformat()
    stats = {"internal_active": 912, "external_active": 40, "lost_messages": 0,
             "sent_packets": 5120, "received_packets": 4410}  # fmt: skip
    for host, (v4, v6), running in ((hosts[0], ("FAULT", "FAULT"), True),
                                    (hosts[1], ("MASTER", "MASTER"), False)):  # fmt: skip
        HostHealthSample.objects.create(
            host=host, reachable=True, conntrack_count=1200, conntrack_max=262144,
            softirq_max_share=0.2, softirq_per_cpu=[0.2, 0.1],
            conntrack_stats={"drop": 0, "early_drop": 0, "insert_failed": 0, "invalid": 31},
            quota_hits=[{"address": member.public_ipv4.address, "packets": 18250}],
            ha={"instances": {"ipv4": {"state": v4, "since": since},
                              "ipv6": {"state": v6, "since": since}},
                "keepalived": {"running": True},
                # pl-nat1's notify hook has been running for 12 minutes (a stuck conntrackd)
                "transition_running": host is hosts[0],
                "conntrackd": {"running": running, **({"stats": stats} if running else {})}},
        )  # fmt: skip
    UserFactory(username="ada", roles=["admin"])
    status_cache_clear()  # the samples came in behind the health beat's back
    return hosts


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize("locale", ["en-GB", "de-DE"])
def test_failover_and_quota_sections_fit_and_read(browser, live_server, pair, width, locale):
    context, page = staff_context(
        browser, live_server.url, username="ada", locale=locale, width=width
    )
    german = locale.startswith("de")
    for path in ("/firewalls/", "/firewalls/pl-nat2/", "/status/"):
        page.goto(path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} at {width}px is {overflow}px too wide"
        if SHOTS.is_dir():
            name = path.strip("/").replace("/", "_") or "root"
            page.screenshot(path=str(SHOTS / f"{name}-{locale}-{width}.png"), full_page=True)
    page.goto("/firewalls/")
    roles = page.get_by_test_id("roles-pl-nat2").inner_text()
    assert ("primär" if german else "primary") in roles
    warnings = page.get_by_test_id("warnings-pl-nat2").inner_text()
    assert ("conntrackd läuft nicht" if german else "conntrackd is not running") in warnings
    stuck = page.get_by_test_id("warnings-pl-nat1").inner_text()
    assert (
        "Failover-Hook steuert conntrackd seit 12 min"
        if german
        else "failover hook has been driving conntrackd for 12 min"
    ) in stuck
    page.goto("/firewalls/pl-nat1/")
    quota = page.get_by_test_id("conntrack").inner_text()
    assert "18,250" in quota or "18.250" in quota
    # The resync action is a real button, reachable from the keyboard.
    button = page.get_by_role("button", name="Verbindungszustände neu abgleichen" if german
                              else "Resync connection states")  # fmt: skip
    button.focus()
    assert page.evaluate("document.activeElement.textContent").strip() == button.inner_text()
    page.goto("/status/")
    assert ("Backup-Firewall" if german else "backup firewall") in page.get_by_test_id(
        "on-backup"
    ).inner_text()
    context.close()
