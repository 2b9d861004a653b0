"""Who sees which traffic: a member their own (page, panel, API), staff anyone's and the top
talkers; bad query parameters answer 400 naming them; traffic_collect reports per host."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from apps.firewall.models import FirewallHost, Site
from apps.traffic.services import Row, traffic_store
from tests.factories import device_add, member_active

pytestmark = pytest.mark.django_db


@pytest.fixture
def counted():
    site = Site.objects.create(name="north")
    host = FirewallHost.objects.create(name="nat1", address="10.255.255.11", site=site)
    ann, bob = member_active(), member_active()
    da, db = device_add(ann, "laptop"), device_add(bob, "tv")
    now = timezone.now()
    traffic_store(
        host=host, epoch="e",
        rows=[Row("acct4_in", str(da.ipv4), 10, 3_500_000), Row("acct4_out", str(da.ipv4), 5, 120_000),
              Row("acct4_in", str(db.ipv4), 1, 2_000)], now=now,
    )  # fmt: skip
    return ann, bob, site, now


def _login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_member_sees_their_month_and_chart_on_their_page(counted):
    ann, _bob, _, _ = counted
    page = _login(ann.user).get(reverse("members:dashboard"))
    html = page.content.decode()
    assert 'data-testid="traffic-panel"' in html
    assert 'data-testid="traffic-month-in">3.3\xa0MB<' in html
    assert 'data-testid="traffic-month-out">117.2\xa0KB<' in html
    assert "<svg" in html
    assert "chart" in html


def test_member_cannot_read_another_members_traffic(counted):
    ann, bob, _, _ = counted
    client = _login(ann.user)
    assert client.get(reverse("traffic:member", args=[bob.pk])).status_code == 404
    assert client.get(reverse("api-member-traffic", args=[bob.pk])).status_code == 404
    assert client.get(reverse("traffic:top")).status_code == 403
    assert client.get(reverse("api-traffic-top"), {"hour": "2026-11-20T10:00"}).status_code == 403


def test_the_period_switch_answers_the_panel_for_7_30_90_days(counted):
    ann, _, _, _ = counted
    client = _login(ann.user)
    for days in (7, 90):
        panel = client.get(
            reverse("traffic:member", args=[ann.pk]), {"days": days}, HTTP_HX_REQUEST="true"
        )
        assert panel.status_code == 200
        assert panel.content.decode().count("<tr><td>") == days
    api = client.get(reverse("api-member-traffic", args=[ann.pk]), {"days": 7}).json()
    assert api["month"] == {"bytes_in": 3_500_000, "bytes_out": 120_000}
    assert len(api["series"]) == 7
    assert api["series"][-1]["bytes_in"] == 3_500_000
    bad = client.get(reverse("api-member-traffic", args=[ann.pk]), {"days": 12})
    assert bad.status_code == 400
    assert "days" in bad.json()
    unknown = client.get(reverse("api-member-traffic", args=[ann.pk]), {"dayz": 7})
    assert unknown.status_code == 400
    assert "dayz" in unknown.json()


def test_staff_see_top_talkers_of_an_hour_on_the_page_and_in_the_api(counted, client_for):
    ann, bob, site, now = counted
    client = client_for("volunteer")
    local = timezone.localtime(now)
    page = client.get(
        reverse("traffic:top"),
        {"day": local.date().isoformat(), "hour": local.hour, "site": site.pk},
    )
    html = page.content.decode()
    assert page.status_code == 200
    assert html.index(reverse("members:member_detail", args=[ann.pk])) < html.index(
        reverse("members:member_detail", args=[bob.pk])
    )
    api = client.get(
        reverse("api-traffic-top"), {"hour": local.isoformat(), "site": site.pk}
    ).json()
    assert [r["member"] for r in api["rows"]] == [ann.pk, bob.pk]
    assert api["span"] == "h"
    assert api["rows"][0]["bytes_out"] == 120_000
    assert client.get(reverse("api-traffic-top"), {"hour": "yesterday"}).status_code == 400
    assert (
        client.get(reverse("api-traffic-top"), {"hour": local.isoformat(), "site": 999}).status_code
        == 400
    )
    bad = client.get(reverse("traffic:top"), {"day": "2026-13-45", "hour": "99"})
    assert bad.status_code == 422
    assert "error" in bad.content.decode()
    empty = client.get(reverse("traffic:top"), {"day": "2020-01-01", "hour": 3})
    assert "No traffic was counted" in empty.content.decode()


def test_staff_see_a_members_traffic_on_the_member_page(counted, client_for):
    ann, _, _, _ = counted
    page = client_for("support").get(reverse("members:member_detail", args=[ann.pk]))
    assert 'data-testid="traffic-month-in">3.3\xa0MB<' in page.content.decode()


def test_traffic_collect_says_when_no_host_answers(counted):
    FirewallHost.objects.update(address="127.0.0.1", port=1)  # loopback: nothing listens there
    with pytest.raises(CommandError, match="no host answered"):
        call_command("traffic_collect")


def test_traffic_collect_without_hosts_says_so(capsys):
    call_command("traffic_collect")
    assert "no enabled firewall host" in capsys.readouterr().out
