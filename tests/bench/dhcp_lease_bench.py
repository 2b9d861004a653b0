"""A device registered through the API -> a real DHCP client in the lab leases its reserved
address: 20 devices one after another, through the real firewall worker and Kea on both lab hosts.

Run by tests/bench/run.py in a subprocess (root: it builds the lab) with DATABASE_URL set to a
scratch database seeded by seed_demo (the demo's 50 members in the lab's ranges, or a copy of
the 20,000-member one with PORTAL_BENCH_WIDE) and its own Redis database; prints one JSON
object. Method: after the API call answers 201, wait until both lab hosts' Kea configuration
holds the MAC (the push applied on both) and both hosts' Kea path loaded it, then `lab.sh
client MAC` (dhclient in a fresh device namespace, a full DORA) leases; the time is API call
-> lease held.
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


HOSTS = ("pl-nat1", "pl-nat2")


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def kea_request(host: str) -> int:
    return int(_json(ROOT / f"var/lab/{host}/fw/deferred-kea-dhcp4.request").get("seq", 0))


def kea_loaded(host: str, since: int) -> bool:
    """The host's Kea path (portal_fw/deferred.py) loaded a file asked for after request
    `since` (the API call's push), and no request waits."""
    status = _json(ROOT / f"var/lab/{host}/fw/deferred-kea-dhcp4.status")
    seq = int(status.get("seq", 0))
    return status.get("state") == "loaded" and seq > since and seq >= kea_request(host)


def reloads() -> list[float]:
    """Seconds of each reload the hosts' Kea paths logged (their agents' log.jsonl)."""
    seconds = []
    for host in HOSTS:
        log = ROOT / f"var/lab/{host}/fw/log.jsonl"
        for line in log.read_text().splitlines() if log.exists() else []:
            event = json.loads(line)
            if event.get("event") == "deferred-loaded":
                seconds.append(float(event.get("s") or 0))
    return seconds or [0.0]


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
        if os.environ.get("PORTAL_BENCH_WIDE"):
            # seed_demo's large layout puts devices in 10.1-10.80.x.x, outside the lab's
            # 10.100.0.0/16: the site's member network spans them, so every seeded device is a
            # reservation of Kea's configuration (60,000 at 20,000 members).
            from apps.firewall.models import Site

            Site.objects.update(member_network4="10.0.0.0/8", gateway4="10.100.0.1")
        started = time.monotonic()
        call_command("firewall_push", now=True, stdout=open(os.devnull, "w"))  # noqa: SIM115
        full_push = time.monotonic() - started
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
        times, pushed, loaded = [], [], []
        for i, mac in enumerate(macs):
            since = {h: kea_request(h) for h in HOSTS}
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
            pushed.append(time.monotonic() - started)
            # The Kea path reloads after the push (docs/dhcp.md): the device asks once both
            # hosts' Kea loaded the file (a DISCOVER during a reload is answered at the
            # client's next retry, seconds later).
            while time.monotonic() - started < 30 and not all(
                kea_loaded(h, since[h]) for h in HOSTS
            ):
                time.sleep(0.01)
            loaded.append(time.monotonic() - started)
            got = lab("client", mac)
            while got != address and time.monotonic() - started < 30:  # (a reload under way)
                time.sleep(0.05)
                got = lab("client-renew", mac)
            times.append(time.monotonic() - started if got == address else float("inf"))
        ok = [t for t in times if t != float("inf")]
        ok.sort()
        result = {
            "members": Member.objects.filter(status__in=("active", "test")).count(),
            "full_push": full_push,
            "loadavg": os.getloadavg(),
            "rounds": ROUNDS,
            "leased": len(ok),
            "p50": statistics.median(ok) if ok else None,
            "p95": ok[min(len(ok) - 1, int(0.95 * len(ok)))] if ok else None,
            "max": max(ok) if ok else None,
            "pushed_p50": statistics.median(pushed),
            "loaded_p50": statistics.median(loaded),
            "reload_p50": statistics.median(reloads()),
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
