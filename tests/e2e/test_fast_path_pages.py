"""A site whose fast path the host's kernel cannot carry, and a host with flows on the fast
path, as staff see them in Chromium: at 390 and 1280 px, in English and German, the refusal
says what to do and nothing scrolls sideways (issue 29)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from apps.firewall.choices import PushStatus
from apps.firewall.models import FirewallHost
from apps.health.models import HostHealthSample
from portal_fw import probes
from tests.e2e.conftest import staff_context
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)
SHOTS = Path(os.environ.get("PORTAL_SCREENSHOTS", "/nonexistent"))
NFT_SAID = "/dev/stdin:2:12-16: Error: Could not process rule: No such file or directory"


@pytest.fixture
def hosts():
    refused = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    # What the push stores for the agent's refusal (tests/e2e/lab/test_flowtable_probe.py).
    refused.mark_error(
        f"check: the host refused the bundle: {probes.REFUSALS[probes.FLOWTABLE]}\n{NFT_SAID}"
    )
    fast = FirewallHost.objects.create(name="pl-nat2", address="10.255.255.12")
    fast.push_status = PushStatus.APPLIED
    fast.save()
    HostHealthSample.objects.create(
        host=fast, reachable=True, conntrack_count=52000, conntrack_max=262144,
        conntrack_stats={"drop": 0, "early_drop": 0, "insert_failed": 0, "invalid": 3,
                         "offloaded": 48211},
    )  # fmt: skip
    UserFactory(username="ada", roles=["admin"])
    return refused, fast


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize("locale", ["en-GB", "de-DE"])
def test_the_refusal_and_the_offloaded_flows_read_and_fit(
    browser, live_server, hosts, width, locale
):
    context, page = staff_context(
        browser, live_server.url, username="ada", locale=locale, width=width
    )
    german = locale.startswith("de")
    for path in ("/firewalls/", "/firewalls/pl-nat1/", "/firewalls/pl-nat2/"):
        page.goto(path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} at {width}px is {overflow}px too wide"
        if SHOTS.is_dir():
            name = "fastpath-" + (path.strip("/").replace("/", "_") or "root")
            page.screenshot(path=str(SHOTS / f"{name}-{locale}-{width}.png"), full_page=True)
    what_to_do = (
        "schalten Sie den Schnellpfad des Standorts ab"
        if german
        else "turn off the site's fast path"
    )
    page.goto("/firewalls/")
    assert what_to_do in page.get_by_test_id("push-error-pl-nat1").inner_text()
    page.goto("/firewalls/pl-nat1/")
    error = page.get_by_test_id("push-error").inner_text()
    assert what_to_do in error
    assert "CONFIG_NF_FLOW_TABLE" in error
    assert "No such file or directory" in error  # what nft said, as it said it
    page.goto("/firewalls/pl-nat2/")
    assert page.get_by_test_id("offloaded").inner_text() in ("48,211", "48.211")
    label = "Verbindungen jetzt auf dem Schnellpfad" if german else "Flows on the fast path now"
    assert label in page.get_by_test_id("conntrack").inner_text()
    context.close()
