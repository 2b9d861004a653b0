"""Two sites in the lab (pl-nat1 alone in site "north", pl-nat2 in "south"), a real firewall
worker (one process, threads): sites roll out independently and in parallel."""

from __future__ import annotations

import os

import pytest
from lab_support import WORKER_ENV, in_ns

from apps.firewall.choices import PushStatus, SiteStatus
from apps.firewall.models import FirewallHost, Site
from apps.firewall.pipeline import site_lock
from tests.celery_proc import celery_start, celery_stop, wait_until
from tests.factories import device_add, member_active

pytestmark = [pytest.mark.lab, pytest.mark.django_db(transaction=True)]


def in_snat_map(host: str, address: str) -> bool:
    listing = in_ns(host, "nft", "list", "map", "ip", "portal_nat", "src_nat").stdout
    return f"{address} " in listing


@pytest.fixture
def sites(hosts):
    north, south = Site.objects.create(name="north"), Site.objects.create(name="south")
    FirewallHost.objects.filter(name="pl-nat1").update(site=north)
    FirewallHost.objects.filter(name="pl-nat2").update(site=south)
    return north, south


@pytest.fixture
def firewall_worker(sites, sync_on, tmp_path):
    """The firewall queue's worker as production runs it: one process, a thread pool."""
    log = tmp_path / "firewall.log"
    proc = celery_start(
        "worker",
        "-Q",
        "firewall",
        "--pool",
        "threads",
        "--concurrency",
        "4",
        "--purge",
        "--without-mingle",
        "--without-gossip",
        "-l",
        "INFO",
        "--hostname",
        f"fwsites-{os.getpid()}@%h",
        log=log,
        env=WORKER_ENV,
    )
    try:
        assert wait_until(lambda: "ready" in log.read_text(), 30), log.read_text()
        yield log
    finally:
        celery_stop(proc)


def test_a_bundle_refused_at_one_site_leaves_the_other_sites_rollout_untouched(
    sites, firewall_worker
):
    north, south = sites
    # north's host names a shaping interface it does not have: its bundle fails the check.
    FirewallHost.objects.filter(name="pl-nat1").update(member_interfaces="nosuch0")
    device = device_add(member_active(), "laptop")
    assert wait_until(lambda: in_snat_map("pl-nat2", device.ipv4), 20, 0.1), (
        firewall_worker.read_text()[-3000:]
    )
    nat1 = FirewallHost.objects.get(name="pl-nat1")
    assert wait_until(
        lambda: FirewallHost.objects.get(name="pl-nat1").push_status == PushStatus.ERROR, 10
    )
    nat1.refresh_from_db()
    assert "refused" in nat1.error_reason
    assert "nosuch0" in nat1.error_reason
    assert not in_snat_map("pl-nat1", device.ipv4)
    # The site is marked when its run ends (after the host's error is recorded).
    assert wait_until(lambda: Site.objects.get(pk=north.pk).status == SiteStatus.FAILED, 20)
    north.refresh_from_db()
    assert "pl-nat1" in north.status_reason
    assert wait_until(lambda: Site.objects.get(pk=south.pk).status == SiteStatus.IDLE, 10)
    assert FirewallHost.objects.get(name="pl-nat2").push_status == PushStatus.APPLIED


def test_a_long_rollout_at_one_site_does_not_hold_another(sites, firewall_worker):
    north, _south = sites
    with site_lock(north.pk, wait=15):  # north is busy (a slow host) for as long as this runs
        device = device_add(member_active(), "phone")
        assert wait_until(lambda: in_snat_map("pl-nat2", device.ipv4), 20, 0.1), (
            firewall_worker.read_text()[-3000:]
        )
        assert not in_snat_map("pl-nat1", device.ipv4)
    # Released: north's waiting run takes its lock and catches up.
    assert wait_until(lambda: in_snat_map("pl-nat1", device.ipv4), 20, 0.1), (
        firewall_worker.read_text()[-3000:]
    )
