"""A site's pair: which host is primary for which family, and what the portal refuses."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import translation

from apps.firewall.models import FirewallHost, Site
from apps.firewall.snapshot import firewall_snapshot_build
from workers.ruleset import SnapshotError

pytestmark = pytest.mark.django_db

VIPS = "member 10.100.0.1/16\nuplink 203.0.113.1/24\nmember 2001:db8:100::1/48"


def paired_site(**site_fields) -> tuple[Site, FirewallHost, FirewallHost]:
    site = Site.objects.create(name="pair", virtual_addresses=VIPS, **site_fields)
    hosts = [
        FirewallHost.objects.create(
            name=f"fw{n}",
            address=f"192.0.2.{n}",
            site=site,
            rollout_order=n,
            sync_interface="sync0",
            sync_address4=f"10.255.254.{n}",
            sync_address6=f"fdff::{n}",
        )
        for n in (1, 2)
    ]
    return site, *hosts


def test_first_host_is_primary_for_ipv4_and_the_second_for_ipv6():
    _site, fw1, fw2 = paired_site()
    ha1 = firewall_snapshot_build(host=fw1).ha
    ha2 = firewall_snapshot_build(host=fw2).ha
    assert (ha1.priority4, ha1.priority6) == (200, 100)
    assert (ha2.priority4, ha2.priority6) == (100, 200)
    assert str(ha1.peer4) == "10.255.254.2"
    assert str(ha2.peer4) == "10.255.254.1"
    assert ha1.addresses4 == (("dorm0", "10.100.0.1/16"), ("inet0", "203.0.113.1/24"))
    assert ha1.addresses6 == (("dorm0", "2001:db8:100::1/48"),)
    assert set(ha1.ignore_addresses) == {"192.0.2.1", "192.0.2.2"}


def test_the_site_chooses_the_primaries_and_preemption():
    site, fw1, fw2 = paired_site(vrrp_preempt=False, vrrp_advert_ms=200)
    site.ipv4_primary = fw2
    site.ipv6_primary = fw2
    site.save()
    ha1 = firewall_snapshot_build(host=fw1).ha
    assert (ha1.priority4, ha1.priority6) == (100, 100)
    assert ha1.preempt is False
    assert ha1.advert_ms == 200
    assert firewall_snapshot_build(host=fw2).ha.priority4 == 200


def test_no_virtual_addresses_or_no_sync_link_means_no_failover():
    site, fw1, _fw2 = paired_site()
    Site.objects.filter(pk=site.pk).update(virtual_addresses="")
    fw1.refresh_from_db()
    assert firewall_snapshot_build(host=fw1).ha is None


def test_a_third_host_with_a_sync_link_is_refused_by_name():
    site, fw1, _ = paired_site()
    FirewallHost.objects.create(
        name="fw3", address="192.0.2.3", site=site, sync_interface="sync0",
        sync_address4="10.255.254.3",
    )  # fmt: skip
    with pytest.raises(SnapshotError, match="site pair: failover needs exactly two"):
        firewall_snapshot_build(host=fw1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gateway 10.100.0.1/16", "Line 1"),
        ("member 10.100.0.1", "Line 1"),
        ("member 10.100.0.1/16\nuplink 300.1.1.1/24", "Line 2: 300.1.1.1/24 is not"),
    ],
)
def test_bad_virtual_addresses_are_a_form_error(text, message):
    site = Site(name="x", virtual_addresses=text)
    with pytest.raises(ValidationError, match=message):
        site.full_clean()


def test_a_sync_link_needs_its_address_and_must_not_be_a_data_interface():
    host = FirewallHost(name="fw9", address="192.0.2.9", sync_interface="dorm0")
    with pytest.raises(ValidationError) as info:
        host.full_clean()
    assert set(info.value.message_dict) >= {"sync_interface", "sync_address4"}


def ha_sample(
    host, ipv4, ipv6, *, conntrackd=True, lost=0, internal=10, external=12, transition=None
):
    """A health sample of HOST; TRANSITION: seconds since the notify hook began a transition
    that it is still driving (None: none runs)."""
    from django.utils import timezone

    from apps.health.models import HostHealthSample

    since = "x" if transition is None else (timezone.now() - timedelta(seconds=transition))
    return HostHealthSample.objects.create(
        host=host,
        reachable=True,
        ha={
            "transition_running": transition is not None,
            "instances": {"ipv4": {"state": ipv4, "since": str(since)}, "ipv6": {"state": ipv6}},
            "keepalived": {"running": True},
            "conntrackd": {
                "running": conntrackd,
                "stats": {"internal_active": internal, "external_active": external,
                          "lost_messages": lost, "sent_packets": 5, "received_packets": 6},
            },
        },
    )  # fmt: skip


def test_the_host_pages_show_roles_and_warnings_in_both_languages(client_for):
    from django.urls import reverse

    _site, fw1, fw2 = paired_site()
    ha_sample(fw1, "MASTER", "MASTER")
    ha_sample(fw2, "MASTER", "BACKUP", conntrackd=False)
    admin = client_for("admin")
    listing = admin.get(reverse("firewall:host_list")).text
    assert "Both hosts are primary for IPv4" in listing
    assert "conntrackd is not running" in listing
    detail = admin.get(reverse("firewall:host_detail", args=["fw2"])).text
    assert 'data-testid="failover"' in detail
    assert "Resync connection states" in detail
    german = admin.get(reverse("firewall:host_detail", args=["fw2"]), HTTP_ACCEPT_LANGUAGE="de")
    assert "Beide Hosts sind Primärsystem für IPv4" in german.text
    assert "Verbindungszustände neu abgleichen" in german.text
    volunteer = client_for("volunteer").get(reverse("firewall:host_detail", args=["fw2"])).text
    assert "Resync connection states" not in volunteer


def test_sync_errors_rising_and_no_primary_are_warnings():
    from apps.health.selectors import firewall_host_states

    _site, fw1, fw2 = paired_site()
    ha_sample(fw1, "BACKUP", "BACKUP", lost=3)
    ha_sample(fw2, "BACKUP", "BACKUP")
    ha_sample(fw1, "BACKUP", "BACKUP", lost=9)
    codes = {w.code for s in firewall_host_states() if s.host.pk == fw1.pk for w in s.warnings}
    assert {"sync-errors", "no-primary"} <= codes


def test_a_host_lacking_the_states_its_peer_carries_is_a_warning_a_host_without_a_role_not():
    """The numbers of the lab (tests/e2e/lab/test_ha_resync.py): after a failback pl-nat1 held
    0 of the 150 IPv6 states pl-nat2 carries (issue 25). While pl-nat1 is down (FAULT) its
    kernel still holds its 850 old states for conntrackd's PurgeTimeout, and pl-nat2, primary
    for everything, has flushed its copy: that is no problem to report."""
    from apps.health.selectors import firewall_host_states

    def diverging():
        return [
            str(w.message)
            for s in firewall_host_states()
            if s.host.pk == fw1.pk
            for w in s.warnings
            if w.code == "sync-diverges"
        ]

    _site, fw1, fw2 = paired_site()
    ha_sample(fw1, "MASTER", "BACKUP", internal=1000, external=0)
    ha_sample(fw2, "BACKUP", "MASTER", internal=1000, external=1000)
    assert diverging() == ["fw1 holds 0 of its peer's 1000 connection states."]

    ha_sample(fw1, "FAULT", "FAULT", internal=850, external=1000)
    ha_sample(fw2, "MASTER", "MASTER", internal=1000, external=0)
    assert diverging() == []

    ha_sample(fw1, "MASTER", "BACKUP", internal=1000, external=1000)
    ha_sample(fw2, "BACKUP", "MASTER", internal=1000, external=1000)
    assert diverging() == []


def test_counts_taken_while_a_transition_refills_the_caches_are_no_divergence_a_hook_stuck_is():
    """Seen in the lab (test_ha_resync.py): a health sample taken while pl-nat1's notify hook
    waited for the commit's late destroy events showed "pl-nat2 holds 2011 of its peer's 1498
    connection states"; a second later the hook's resync had refilled the cache to 2057."""
    from apps.health.selectors import firewall_host_states

    def codes(host):
        return {w.code for s in firewall_host_states() if s.host.pk == host.pk for w in s.warnings}

    _site, fw1, fw2 = paired_site()
    ha_sample(fw1, "MASTER", "BACKUP", internal=1498, external=2057, transition=2)
    ha_sample(fw2, "BACKUP", "MASTER", internal=2057, external=2011)
    assert "sync-diverges" not in codes(fw2)
    assert "transition-stuck" not in codes(fw1)

    ha_sample(fw1, "MASTER", "BACKUP", internal=1498, external=2057)  # the hook is done
    assert "sync-diverges" in codes(fw2)

    ha_sample(fw1, "MASTER", "BACKUP", internal=1498, external=2057, transition=95)
    [stuck] = [w for s in firewall_host_states() if s.host.pk == fw1.pk for w in s.warnings
               if w.code == "transition-stuck"]  # fmt: skip
    assert "for 95 s" in str(stuck.message)
    with translation.override("de"):
        german = [str(w.message) for s in firewall_host_states() if s.host.pk == fw1.pk
                  for w in s.warnings if w.code == "transition-stuck"]  # fmt: skip
    assert german == [
        "Der Failover-Hook steuert conntrackd seit 95 s nach dem letzten Wechsel (das dauert "
        "sonst Sekunden): sein Protokoll liegt im Laufzeitverzeichnis des Paares."
    ]


def test_resync_is_for_admins_and_says_why_it_failed(client_for):
    from django.urls import reverse

    single = FirewallHost.objects.create(name="solo", address="192.0.2.50")
    url = reverse("firewall:state_resync", args=["solo"])
    assert client_for("volunteer").post(url).status_code == 403
    response = client_for("admin").post(url, follow=True)
    assert response.status_code == 200
    assert "solo is not one of a pair" in response.text
    assert single.pk
