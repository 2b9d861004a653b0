"""The whole path with a real Celery worker: a change in the database is live on both lab
firewalls within seconds; bursts coalesce; a killed worker and a host that was down converge."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from lab_support import WORKER_ENV, in_ns, lab_sh

from apps.firewall.models import FirewallHost, RuleSetVersion
from apps.firewall.services import firewall_push_now
from apps.infra.redis import redis_client
from tests.celery_proc import celery_start, celery_stop, wait_until
from tests.factories import device_add, member_active

pytestmark = [pytest.mark.lab, pytest.mark.django_db(transaction=True)]


def in_snat_map(host: str, address: str) -> bool:
    listing = in_ns(host, "nft", "list", "map", "ip", "portal_nat", "src_nat").stdout
    return f"{address} " in listing or f"{address}," in listing or f"{address}\n" in listing


def live_everywhere(address: str) -> bool:
    return all(in_snat_map(h, address) for h in ("pl-nat1", "pl-nat2"))


def test_a_new_device_is_live_on_both_firewalls_within_seconds(worker, tmp_path, make_user):
    member = member_active()

    def confirmed() -> bool:
        latest = {
            h: RuleSetVersion.objects.filter(host=h).first() for h in FirewallHost.objects.all()
        }
        return all(
            h.push_status == "applied" and v is not None and h.applied_checksum == v.content_hash
            for h, v in latest.items()
        )

    # The member's check-in ran (the worker's first, full run): the device is the change after.
    assert wait_until(confirmed, 15, 0.1), (tmp_path / "worker.log").read_text()[-3000:]
    started = time.monotonic()
    device = device_add(member, "laptop")
    assert wait_until(lambda: live_everywhere(device.ipv4), 15, 0.05), (
        tmp_path / "worker.log"
    ).read_text()[-3000:]
    elapsed = time.monotonic() - started
    print(f"device live on both firewalls after {elapsed:.2f} s")  # noqa: T201
    assert wait_until(confirmed, 10, 0.1), [
        (h.name, h.push_status, h.error_reason) for h in FirewallHost.objects.all()
    ]
    # A full compile's texts are written beside the pushes, by the run itself (the hosts'
    # confirmations are stored while the last texts may still be written: the run ends right
    # after). The device came by the delta path (issue 26): its version stores no texts (size 0)
    # until the next full compile renders them, which the staff's "push now" asks for.
    versions = RuleSetVersion.objects.filter(host__name__in=["pl-nat1", "pl-nat2"])
    full = versions.exclude(size_bytes=0)
    assert full.exists()
    assert wait_until(lambda: not full.filter(texts_pending=True).exists(), 10, 0.1)
    pending = list(versions.filter(texts_pending=True).values_list("pk", flat=True))
    assert pending, "the device's change took the delta path"
    assert not versions.filter(texts_pending=True).exclude(size_bytes=0, nft_text="").exists()
    firewall_push_now(actor=make_user("admin", roles=("admin",)))
    rendered = RuleSetVersion.objects.filter(pk__in=pending)
    assert wait_until(lambda: not rendered.filter(texts_pending=True).exists(), 15, 0.1), [
        (h.name, h.push_status, h.error_reason) for h in FirewallHost.objects.all()
    ]
    assert wait_until(lambda: not versions.filter(texts_pending=True).exists(), 10, 0.1)
    assert all("table inet portal_fw" in v.nft_text for v in versions.all())
    assert all(device.ipv4 in v.nft_text for v in rendered)


def test_a_burst_of_changes_ends_live_in_a_handful_of_rollouts(worker, tmp_path):
    member = member_active()
    before = RuleSetVersion.objects.filter(host__name="pl-nat1").count()
    devices = [device_add(member_active(), f"d{n}") for n in range(12)] + [device_add(member)]
    assert wait_until(lambda: all(live_everywhere(d.ipv4) for d in devices[-3:]), 30, 0.2), (
        tmp_path / "worker.log"
    ).read_text()[-3000:]
    assert all(live_everywhere(d.ipv4) for d in devices)
    runs = RuleSetVersion.objects.filter(host__name="pl-nat1").count() - before
    assert 1 <= runs <= 8, runs


def test_an_unreachable_host_gets_the_change_when_it_returns(worker, tmp_path):
    assert lab_sh("sshd-stop", "nat1").returncode == 0
    device = device_add(member_active(), "phone")
    assert wait_until(lambda: in_snat_map("pl-nat2", device.ipv4), 15, 0.1)
    assert wait_until(
        lambda: FirewallHost.objects.get(name="pl-nat1").push_status == "unreachable", 10
    )
    assert not in_snat_map("pl-nat1", device.ipv4)
    assert lab_sh("sshd-start", "nat1").returncode == 0
    assert wait_until(lambda: in_snat_map("pl-nat1", device.ipv4), 30, 0.2), (
        tmp_path / "worker.log"
    ).read_text()[-3000:]


def test_a_worker_killed_mid_rollout_converges(hosts, sync_on, tmp_path):
    log = tmp_path / "worker.log"
    proc = celery_start(
        "worker",
        "--pool",
        "prefork",
        "--concurrency",
        "1",
        "-Q",
        "celery,firewall",
        "--purge",
        "--without-mingle",
        "-l",
        "INFO",
        "--without-gossip",
        "--hostname",
        f"fwk-{os.getpid()}@%h",
        log=log,
        env=WORKER_ENV,
    )
    try:
        assert wait_until(lambda: "ready" in log.read_text(), 30), log.read_text()
        device = device_add(member_active(), "tablet")
        # Kill the pool process while it holds the lock (compiling or pushing).
        assert wait_until(
            lambda: list(redis_client().scan_iter("portal:firewall:site:*:lock")), 15, 0.01
        )
        children = subprocess.run(
            ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=False
        ).stdout.split()
        assert children, "the prefork pool process was not found"
        for pid in children:
            os.kill(int(pid), signal.SIGKILL)
        # The message is requeued (acks_late, reject on worker lost); the dead run's lock
        # expires; the next run converges.
        assert wait_until(lambda: live_everywhere(device.ipv4), 45, 0.2), log.read_text()[-4000:]
    finally:
        celery_stop(proc)
