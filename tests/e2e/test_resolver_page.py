"""The members' resolver on a host's page, as staff see it in Chromium: at 390 and 1280 px, in
English and German, the rates between the two newest samples and the totals, nothing scrolls
sideways; a resolver that does not answer is a warning in words."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from apps.firewall.models import FirewallHost
from apps.health.models import HostHealthSample
from apps.tickets.status import status_cache_clear
from tests.e2e.conftest import staff_context
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)
SHOTS = Path(os.environ.get("PORTAL_SCREENSHOTS", "/nonexistent"))


@pytest.fixture
def resolvers():
    now = timezone.now()
    nat1 = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    nat2 = FirewallHost.objects.create(name="pl-nat2", address="10.255.255.12", rollout_order=1)
    before = {"ok": True, "queries": 100_000, "cache_hits": 80_000, "cache_misses": 20_000,
              "servfail": 100, "ratelimited": 0, "recursion_avg_seconds": 0.021}  # fmt: skip
    after = {**before, "queries": 130_000, "cache_hits": 107_000, "servfail": 130,
             "ratelimited": 1_500}  # fmt: skip
    HostHealthSample.objects.create(host=nat1, reachable=True, at=now - timedelta(seconds=30),
                                    resolver=before)  # fmt: skip
    HostHealthSample.objects.create(host=nat1, reachable=True, at=now, resolver=after)
    HostHealthSample.objects.create(
        host=nat2, reachable=True, at=now,
        resolver={"ok": False, "error": "unbound-control status: connection refused"},
    )  # fmt: skip
    UserFactory(username="ada", roles=["admin"])
    status_cache_clear()
    return nat1, nat2


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize("locale", ["en-GB", "de-DE"])
def test_the_resolver_section_reads_and_fits(browser, live_server, resolvers, width, locale):
    context, page = staff_context(
        browser, live_server.url, username="ada", locale=locale, width=width
    )
    german = locale.startswith("de")
    page.goto("/firewalls/pl-nat1/")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"at {width}px the page is {overflow}px too wide"
    if SHOTS.is_dir():
        page.screenshot(path=str(SHOTS / f"resolver-{locale}-{width}.png"), full_page=True)
    section = page.get_by_test_id("resolver").inner_text()
    assert ("Resolver der Mitglieder" if german else "Members' resolver") in section
    assert "1000.0" in section or "1000,0" in section  # 30,000 queries in 30 s
    assert "90" in section  # 27,000 of 30,000 from the cache
    assert "50.0" in section or "50,0" in section  # rate-limited per second
    page.goto("/firewalls/pl-nat2/")
    down = page.get_by_test_id("resolver").inner_text()
    assert ("Unbound antwortet nicht" if german else "Unbound does not answer") in down
    page.goto("/firewalls/")
    warning = "Resolver der Mitglieder antwortet nicht" if german else "resolver does not answer"
    assert warning in page.content()
    context.close()
