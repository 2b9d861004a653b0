"""1,000 alerts in a burst from parallel callers, resends included: no 5xx, no duplicate."""

from __future__ import annotations

import datetime as dt
import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from apps.alerts.models import Alert, AlertGroup
from apps.firewall.models import FirewallHost, Site
from apps.tickets.models import Incident
from tests.factories import BuildingFactory
from tests.integration.alerts.conftest import SECRET, alert, message

CLASSES = ["FirewallPairUnreachable", "ConntrackTableFull", "SoftirqSaturated", "FailoverNoPrimary"]


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_1000_alerts_opens_one_incident_per_site_without_a_5xx(live_server, settings):
    settings.PORTAL_ALERTS_WEBHOOK_SECRET = SECRET
    for n in range(5):
        site = Site.objects.create(name=f"s{n}")
        site.buildings.set([BuildingFactory(code=f"S{n}", name=f"Site {n}")])
        FirewallHost.objects.create(name=f"fw-s{n}", address=f"10.255.254.{n + 1}", site=site)
    start = dt.datetime(2026, 11, 28, 6, 0, tzinfo=dt.UTC)
    # 250 distinct alerts (5 sites x 4 classes x 12 instances, + 10 warnings), each sent 4 times.
    distinct = [
        alert(name, site=f"s{n}", instance=str(i), starts_at=start)
        for n in range(5)
        for name in CLASSES
        for i in range(12)
    ] + [alert("StateSyncLosingMessages", host=f"fw-s{n % 5}", instance=str(n)) for n in range(10)]
    sent = distinct * 4
    assert len(sent) == 1000
    bodies = [json.dumps(message(*sent[i : i + 25])).encode() for i in range(0, 1000, 25)]

    def call(body: bytes) -> int:
        request = urllib.request.Request(  # noqa: S310 (the live server)
            f"{live_server.url}/alerts/webhook",
            data=body,
            headers={"Authorization": f"Bearer {SECRET}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code

    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(call, bodies))
    assert statuses == [200] * len(bodies)
    assert Alert.objects.count() == len(distinct)
    assert AlertGroup.objects.count() == 5 * 4 + 5  # one per site and class, + the warnings
    # Four outage classes per site: one incident each site, the others joined it.
    assert Incident.objects.count() == 5
    for incident in Incident.objects.all():
        assert incident.buildings.count() == 1
        assert incident.alert_groups.count() == 4
