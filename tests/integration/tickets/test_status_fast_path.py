"""The status page's fast path: warm requests skip sessions and the database; firewall health."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from apps.firewall.models import FirewallHost
from apps.tickets.services import incident_declare, incident_update_post
from apps.tickets.status import status_cache_clear, status_data
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_warm_page_needs_no_session_no_database_and_keeps_its_headers(
    django_assert_num_queries,
):
    incident_declare(actor=UserFactory(roles=["support"]), title="Fiber cut")
    status_cache_clear()
    url = reverse("tickets:status_page")
    assert "Fiber cut" in Client().get(url).text  # renders and stores
    with django_assert_num_queries(0):
        response = Client().get(url, HTTP_ACCEPT_LANGUAGE="en")
    assert "Fiber cut" in response.text
    assert "sessionid" not in response.cookies
    assert "csrftoken" not in response.cookies
    assert response["Cache-Control"] == "public, max-age=15"
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"  # SecurityMiddleware still ran
    assert "Accept-Language" in response["Vary"]
    assert response["Content-Language"] == "en"


def test_each_language_gets_its_own_page():
    status_cache_clear()
    url = reverse("tickets:status_page")
    english = Client().get(url, HTTP_ACCEPT_LANGUAGE="en").text
    german = Client().get(url, HTTP_ACCEPT_LANGUAGE="de").text
    assert "Network status" in english
    assert 'lang="de"' in german
    assert Client().get(url, HTTP_ACCEPT_LANGUAGE="de").text == german
    assert Client().get(url, HTTP_ACCEPT_LANGUAGE="en").text == english


def test_post_is_not_answered_by_the_fast_path():
    Client().get(reverse("tickets:status_page"))
    response = Client().post(reverse("tickets:status_page"))
    assert response.status_code == 405


def test_firewall_health_summary_is_shown_from_the_cached_data():
    status_cache_clear()
    FirewallHost.objects.create(name="nat1", address="10.255.255.11")
    FirewallHost.objects.create(name="nat2", address="10.255.255.12")
    data, _stale = status_data()
    # No health samples yet: both count as reporting a problem ("no data").
    assert data["firewalls"] == {"total": 2, "healthy": 0, "degraded": 2, "on_backup": []}
    page = Client().get(reverse("tickets:status_page")).text
    assert 'data-testid="firewall-summary"' in page
    assert "2 of 2 firewalls report a problem" in page


def pair_hosts() -> list[FirewallHost]:
    """An HA pair on the default site: nat1 designated for IPv4, nat2 for IPv6."""
    from apps.firewall.models import Site

    Site.objects.filter(pk=Site.default_pk()).update(virtual_addresses="member 10.100.0.1/16")
    return [
        FirewallHost.objects.create(
            name=f"nat{n}", address=f"10.255.255.1{n}", rollout_order=n, sync_interface="sync0",
            sync_address4=f"10.255.254.{n}",
        )
        for n in (1, 2)
    ]  # fmt: skip


def test_the_status_page_says_when_a_family_runs_on_the_backup_firewall():
    from apps.health.models import HostHealthSample

    hosts = pair_hosts()

    def sample(host, ipv4, ipv6):
        instances = {"ipv4": {"state": ipv4}, "ipv6": {"state": ipv6}}
        HostHealthSample.objects.create(host=host, reachable=True, ha={"instances": instances})

    sample(hosts[0], "MASTER", "BACKUP")
    sample(hosts[1], "BACKUP", "MASTER")
    status_cache_clear()
    assert status_data()[0]["firewalls"]["on_backup"] == []
    sample(hosts[0], "FAULT", "FAULT")  # pl-nat1 is down: the second host carries both
    sample(hosts[1], "MASTER", "MASTER")
    status_cache_clear()
    page = Client().get(reverse("tickets:status_page")).text
    assert "IPv4 traffic is running on the backup firewall" in page
    german = Client().get(reverse("tickets:status_page"), HTTP_ACCEPT_LANGUAGE="de").text
    assert "Der IPv4-Verkehr läuft über die Backup-Firewall" in german


def test_a_failover_reaches_the_cached_status_page_at_once(django_capture_on_commit_callbacks):
    from apps.health.models import HostHealthSample
    from apps.health.services import _store

    hosts = pair_hosts()

    def store(host, ipv4, ipv6):  # as the health beat stores what it read
        instances = {"ipv4": {"state": ipv4}, "ipv6": {"state": ipv6}}
        _store(host, HostHealthSample(host=host, reachable=True, ha={"instances": instances}))

    store(hosts[0], "MASTER", "BACKUP")
    store(hosts[1], "BACKUP", "MASTER")
    status_cache_clear()
    url = reverse("tickets:status_page")
    assert "backup firewall" not in Client().get(url).text  # cached for 30 s from here
    with django_capture_on_commit_callbacks(execute=True) as unchanged:
        store(hosts[0], "MASTER", "BACKUP")
    assert unchanged == []  # the same roles again: the cache stays
    with django_capture_on_commit_callbacks(execute=True):
        store(hosts[0], "FAULT", "FAULT")
        store(hosts[1], "MASTER", "MASTER")
    assert "IPv4 traffic is running on the backup firewall" in Client().get(url).text


def test_no_firewalls_no_summary():
    status_cache_clear()
    page = Client().get(reverse("tickets:status_page")).text
    assert 'data-testid="firewall-summary"' not in page


def test_severity_and_phase_read_in_the_readers_language():
    support = UserFactory(roles=["support"])
    incident = incident_declare(actor=support, title="Fiber cut", severity="major")
    incident_update_post(incident=incident, actor=support, phase="investigating", body="Looking.")
    status_cache_clear()
    url = reverse("tickets:status_page")
    english = Client().get(url, HTTP_ACCEPT_LANGUAGE="en").text  # built (and cached) in English
    german = Client().get(url, HTTP_ACCEPT_LANGUAGE="de").text
    assert "Partial outage" in english
    assert "Investigating" in english
    assert "Teilausfall" in german
    assert "Partial outage" not in german
    assert "Wird untersucht" in german


def _pair_sample(host, ipv4, ipv6, **ha):
    from apps.health.models import HostHealthSample

    instances = {"ipv4": {"state": ipv4}, "ipv6": {"state": ipv6}}
    HostHealthSample.objects.create(host=host, reachable=True, ha={"instances": instances, **ha})


def test_a_takeover_that_kept_traffic_flowing_is_information_not_a_problem():
    """Issue 25: after a failover both families have a primary; the host that gave up its roles
    (FAULT) is not "a firewall reporting a problem" on the public page."""
    hosts = pair_hosts()
    _pair_sample(hosts[0], "FAULT", "FAULT")
    _pair_sample(hosts[1], "MASTER", "MASTER")
    status_cache_clear()
    data = status_data()[0]["firewalls"]
    assert data["degraded"] == 0
    assert data["on_backup"] == ["IPv4"]
    page = Client().get(reverse("tickets:status_page")).text
    assert "report a problem" not in page
    assert "reports a problem" not in page
    assert 'class="status-summary status-summary-info" data-testid="on-backup"' in page
    assert "IPv4 traffic is running on the backup firewall" in page


def test_a_pair_warning_counts_once_not_once_per_host():
    hosts = pair_hosts()
    _pair_sample(hosts[0], "MASTER", "BACKUP")
    _pair_sample(hosts[1], "MASTER", "MASTER")  # both primary for IPv4: one problem of the pair
    status_cache_clear()
    assert status_data()[0]["firewalls"]["degraded"] == 1
    page = Client().get(reverse("tickets:status_page")).text
    assert "1 of 2 firewalls reports a problem" in page
