"""Health collection from the lab firewalls over SSH, warnings, and drift repaired by a push."""

from __future__ import annotations

import pytest
from lab_support import MGMT, in_ns, lab_sh
from push_support import version

from apps.firewall.models import FirewallHost
from apps.firewall.order import ruleset_rollout
from apps.health.models import HostHealthSample
from apps.health.services import host_health_collect, host_warnings
from workers.health import firewall_health_collect

pytestmark = [pytest.mark.lab, pytest.mark.django_db]


@pytest.fixture(autouse=True)
def digest_every_collection(settings):
    """Every collection reads the digest back (not only one every 25 s)."""
    settings.PORTAL_HEALTH_DIGEST_INTERVAL = 0


@pytest.fixture
def applied(hosts):
    versions = [version(h) for h in hosts]
    assert all(o.ok for o in ruleset_rollout(versions=versions))
    return {v.host.name: v for v in versions}


def test_collect_reads_version_conntrack_softirq_and_interfaces(applied):
    host = FirewallHost.objects.get(name="pl-nat1")
    sample = host_health_collect(host=host)
    assert sample.reachable
    assert sample.loaded_version == applied["pl-nat1"].content_hash
    assert sample.conntrack_max
    assert sample.conntrack_max > 0
    assert sample.conntrack_count is not None
    assert 0 <= sample.softirq_max_share <= 1
    assert {"dorm0", "inet0", "mgmt0"} <= set(sample.interfaces)
    assert sample.latency_ms > 0
    assert host_warnings(host=host, sample=sample) == []


def test_unreachable_host_is_recorded_with_the_reason(hosts):
    assert lab_sh("sshd-stop", "nat2").returncode == 0
    host = FirewallHost.objects.get(name="pl-nat2")
    sample = host_health_collect(host=host)
    assert not sample.reachable
    assert MGMT["pl-nat2"] in sample.error
    assert [w.code for w in host_warnings(host=host, sample=sample)] == ["unreachable"]


def test_drift_is_detected_and_repaired_by_the_beat_task(applied):
    # Someone changes the host behind the portal's back.
    in_ns("pl-nat1", "nft", "delete", "table", "inet", "portal_fw")
    host = FirewallHost.objects.get(name="pl-nat1")
    sample = host_health_collect(host=host)
    assert [w.code for w in host_warnings(host=host, sample=sample)] == ["drift"]
    firewall_health_collect()  # the beat task: collect, see the drift, push again
    repaired = host_health_collect(host=host)
    assert repaired.loaded_version == applied["pl-nat1"].content_hash
    assert host_warnings(host=host, sample=repaired) == []


def test_samples_are_bounded_per_host(hosts, settings):
    settings.PORTAL_HEALTH_SAMPLES_KEPT = 2
    host = FirewallHost.objects.get(name="pl-nat1")
    for _ in range(3):
        host_health_collect(host=host)
    assert HostHealthSample.objects.filter(host=host).count() == 2
