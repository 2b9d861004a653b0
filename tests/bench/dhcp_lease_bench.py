"""A device registered through the API -> a real DHCP client in the lab leases its reserved
address: 20 devices one after another, through the real firewall worker and Kea on both lab hosts.

Run by tests/bench/run.py in a subprocess (root: it builds the lab) with DATABASE_URL set to a
scratch database seeded by seed_demo (small layout: the lab's ranges) and its own Redis
database; prints one JSON object. Method: after the API call answers 201, wait until both lab
hosts' Kea configuration holds the MAC (the push applied on both), then `lab.sh client MAC`
(dhclient in a fresh device namespace, a full DORA) leases; the time is API call -> lease held.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import django

ROOT = Path(__file__).resolve().parents[2]
LAB = ["bash", str(ROOT / "deploy/lab/lab.sh")]
ROUNDS = 20


def lab(*args: str) -> str:
    out = subprocess.run([*LAB, *args], capture_output=True, text=True, timeout=60, check=False)
    lines = out.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from rest_framework.test import APIClient

    from apps.infra.redis import redis_client
    from apps.members.models import Member

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    subprocess.run([*LAB, "up"], check=True, capture_output=True)
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"dhcp-lease-bench-{os.getpid()}.log"
    worker = None
    macs = [f"02:bb:00:00:00:{i:02x}" for i in range(1, ROUNDS + 1)]
    try:
        call_command("lab_register", no_devices=True, stdout=open(os.devnull, "w"))  # noqa: SIM115
        call_command("firewall_push", now=True, stdout=open(os.devnull, "w"))  # noqa: SIM115
        stale = list(redis_client().scan_iter("portal:firewall:*"))
        if stale:
            redis_client().delete(*stale)
        worker = subprocess.Popen(
            [str(Path(sys.executable).with_name("celery")), "-A", "portal", "worker", "-Q",
             "firewall", "--pool", "threads", "--concurrency", "4", "--purge",
             "--without-mingle", "--without-gossip", "-l", "INFO"],
            cwd=ROOT, env=os.environ.copy(), stdout=open(log, "w"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while "ready" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        member = Member.objects.filter(user__username="resident").get()
        api = APIClient()
        api.force_authenticate(member.user)
        from apps.network.models import NetworkSettings

        NetworkSettings.objects.filter(pk=1).update(device_limit=100)
        times = []
        for i, mac in enumerate(macs):
            started = time.monotonic()
            response = api.post("/api/devices/", {"name": f"bench-{i}", "mac": mac}, format="json")
            if response.status_code != 201:
                raise SystemExit(f"device {mac}: {response.status_code} {response.content[:200]}")
            address = response.json()["ipv4"]
            # Until both hosts' Kea run the reservation, whichever answers first may not know
            # the MAC yet; a device asks when it renews or reconnects. So: wait (10 ms steps)
            # until both hosts' configuration holds the MAC, then the device asks once.
            confs = [ROOT / f"var/lab/{h}/kea/kea-dhcp4.conf" for h in ("pl-nat1", "pl-nat2")]
            while time.monotonic() - started < 30 and not all(mac in c.read_text() for c in confs):
                time.sleep(0.01)
            got = lab("client", mac)
            while got != address and time.monotonic() - started < 30:  # (a reload under way)
                time.sleep(0.05)
                got = lab("client-renew", mac)
            times.append(time.monotonic() - started if got == address else float("inf"))
        ok = [t for t in times if t != float("inf")]
        ok.sort()
        result = {
            "rounds": ROUNDS,
            "leased": len(ok),
            "p50": statistics.median(ok) if ok else None,
            "p95": ok[min(len(ok) - 1, int(0.95 * len(ok)))] if ok else None,
            "max": max(ok) if ok else None,
        }
        print(json.dumps(result))  # noqa: T201
    finally:
        for mac in macs:
            lab("client-down", mac)
        if worker is not None:
            worker.terminate()
            try:
                worker.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.kill()
        subprocess.run([*LAB, "down"], check=False, capture_output=True)


if __name__ == "__main__":
    main()
