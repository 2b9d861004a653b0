"""Issue 15, seeing it coming: conntrack drops rising, members over their quota (by name), and
the one-core softirq signature of the field reports' outage, on the firewall pages."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.firewall.models import FirewallHost
from apps.health.models import HostHealthSample
from apps.health.services import host_warnings
from apps.network.models import NetworkSettings
from tests.factories import device_add, member_active

pytestmark = pytest.mark.django_db


@pytest.fixture
def host():
    return FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")


def sample(host, **fields):
    return HostHealthSample.objects.create(host=host, reachable=True, **fields)


def codes(host, s):
    return {w.code: w.message for w in host_warnings(host=host, sample=s)}


def test_drops_rising_between_two_samples_warn(host):
    sample(host, conntrack_stats={"drop": 5, "early_drop": 0, "insert_failed": 0, "invalid": 9})
    same = sample(host, conntrack_stats={"drop": 5, "early_drop": 0, "insert_failed": 0})
    assert "conntrack-drops" not in codes(host, same)
    more = sample(host, conntrack_stats={"drop": 905, "early_drop": 3, "insert_failed": 0})
    assert codes(host, more)["conntrack-drops"].endswith("drop +900, early_drop +3.")


def test_one_busy_core_is_named_as_the_outage_signature(host, settings):
    settings.PORTAL_HEALTH_SOFTIRQ_WARN = 0.5
    loop = sample(host, softirq_max_share=0.95, softirq_per_cpu=[0.95, 0.1, 0.1, 0.08])
    assert (
        codes(host, loop)["softirq"]
        == "One core at 95% softirq, the others at 9%: a single flow or a loop."
    )
    even = sample(host, softirq_max_share=0.7, softirq_per_cpu=[0.7, 0.65, 0.68, 0.66])
    assert codes(host, even)["softirq"] == "Softirq load 70% on one core."


def test_staff_see_who_hit_a_quota_on_the_host_page(host, client_for):
    member = member_active()
    device = device_add(member, "torrent-box")
    public = member.public_ipv4.address
    prefix = device.ipv6.rsplit(":", 4)[0] + "::"
    sample(
        host,
        quota_hits=[{"address": public, "packets": 1200}, {"address": prefix, "packets": 7}],
    )
    page = client_for("volunteer").get(reverse("firewall:host_detail", args=[host.name])).text
    assert "1 member(s) hit" not in page  # two addresses, one member: listed twice by address
    assert page.count(reverse("members:member_detail", args=[member.pk])) >= 2
    assert "1,200" in page
    german = client_for("volunteer").get(
        reverse("firewall:host_detail", args=[host.name]), HTTP_ACCEPT_LANGUAGE="de"
    )
    assert "Verbindungskontingent" in german.text


def test_the_quotas_are_admin_settings_that_reach_the_rule_set(client_for):
    from apps.firewall.snapshot import snapshot_data_read

    settings_row = NetworkSettings.load()
    assert snapshot_data_read(cached=False).policy.conntrack_quota_out == 10000
    admin = client_for("admin")
    url = reverse("admin:network_networksettings_change", args=[settings_row.pk])
    form = admin.get(url)
    assert form.status_code == 200
    data = {
        f.name: "" if getattr(settings_row, f.name) is None else getattr(settings_row, f.name)
        for f in NetworkSettings._meta.concrete_fields
        if f.name != "id"
    }
    response = admin.post(url, {**data, "conntrack_quota_devices": 2500})
    assert response.status_code == 302, response.content[:2000]
    policy = snapshot_data_read(cached=False).policy
    assert (policy.conntrack_quota_out, policy.conntrack_quota_in) == (2500, 4000)
    from apps.audit.models import AuditEntry

    entry = AuditEntry.objects.filter(action="networksettings.change").latest("id")
    assert entry.changes["conntrack_quota_devices"] == [10000, 2500]


def test_the_syn_proxy_is_an_admin_setting_off_by_default_that_reaches_the_rule_set(client_for):
    from apps.firewall.snapshot import snapshot_data_read
    from workers.ruleset import compile_snapshot
    from workers.ruleset import snapshot as rs

    settings_row = NetworkSettings.load()
    assert snapshot_data_read(cached=False).policy.syn_proxy is False
    admin = client_for("admin")
    url = reverse("admin:network_networksettings_change", args=[settings_row.pk])
    data = {
        f.name: "" if getattr(settings_row, f.name) is None else getattr(settings_row, f.name)
        for f in NetworkSettings._meta.concrete_fields
        if f.name not in {"id", "syn_proxy"}
    }
    response = admin.post(url, {**data, "syn_proxy": "on"})
    assert response.status_code == 302, response.content[:2000]
    policy = snapshot_data_read(cached=False).policy
    assert policy.syn_proxy is True
    host = rs.Host(name="fw", uplink_interfaces=("inet0",), member_interfaces=("dorm0",))
    assert "synproxy" in compile_snapshot(rs.Snapshot(policy=policy, host=host)).nft


def test_the_flows_on_the_fast_path_are_stored_and_shown(host, client_for):
    """The agent's count of offloaded flows (portal_fw/offload.py) reaches the host page."""
    from apps.health.services import conntrack_stats

    stats = conntrack_stats({"stats": {"drop": 1}, "offloaded": 1234})
    assert stats == {"drop": 1, "offloaded": 1234}
    assert conntrack_stats({"stats": {"drop": 1}, "offloaded": None}) == {"drop": 1}
    sample(host, conntrack_stats=stats)
    url = reverse("firewall:host_detail", args=[host.name])
    page = client_for("volunteer").get(url).text
    assert "Flows on the fast path now" in page
    assert 'data-testid="offloaded">1,234<' in page
    german = client_for("volunteer").get(url, HTTP_ACCEPT_LANGUAGE="de").text
    assert "Verbindungen jetzt auf dem Schnellpfad" in german


def test_a_kea_path_that_did_not_load_the_newest_configuration_warns(host):
    """Issue 26: Kea reloads on its own path; the sample says what it did last."""
    from apps.health.services import _dhcp_state

    loaded = _dhcp_state({"answering": True, "config": {"state": "loaded", "pending": False,
                                                        "seconds": 0.664}})  # fmt: skip
    assert "dhcp-config" not in codes(host, sample(host, dhcp=loaded))
    loading = _dhcp_state({"answering": True, "reloading": True,
                           "config": {"state": "loading", "pending": True}})  # fmt: skip
    assert loading["reloading"] is True
    assert "dhcp-config" not in codes(host, sample(host, dhcp=loading))
    refused = _dhcp_state({"answering": True, "config": {
        "state": "refused", "error": "kea-ctl: config-reload refused: <b>bad</b>"}})  # fmt: skip
    message = codes(host, sample(host, dhcp=refused))["dhcp-config"]
    assert message == (
        "Kea did not load the newest DHCP configuration (refused): "
        "kea-ctl: config-reload refused: <b>bad</b>"
    )
    assert _dhcp_state({"config": "nonsense"}).get("config") is None
