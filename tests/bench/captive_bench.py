"""A walled device registered through the API -> the captive-portal API says "not captive" and
`www.example` loads by name: 10 devices one after another, through the real firewall worker,
Kea and Unbound on both lab hosts.

Run by tests/bench/run.py in a subprocess (root: it builds the lab) with DATABASE_URL set to a
scratch database seeded by seed_demo and its own Redis database; prints one JSON object.
Method per device: `lab.sh client MAC` until it holds a registration-range address (walled);
then the clock starts, the API registers the MAC (201), and the device renews by itself:
`lab.sh client-renew MAC` (dhclient INIT-REBOOT, as a phone does when it re-joins after its
sign-in page says it is done; Kea has no FORCERENEW), every 0.2 s until it holds its reserved
address; then `GET /api/captive-portal/` from that address must say {"captive": false} and
`curl http://www.example/` from the device (its resolv.conf from the lease, the site's
resolvers) must return the page from pl-inet. The time is API call -> page loaded.
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
ROUNDS = 10
PAGE = "www.example from pl-inet"
HTTP = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", str(len(sys.argv[1])))
        self.end_headers(); self.wfile.write(sys.argv[1].encode())
    def log_message(self, *a): pass
http.server.HTTPServer(("203.0.113.10", 80), H).serve_forever()
"""


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

    from apps.dhcp.models import DhcpSettings, RegistrationRange
    from apps.dhcp.walled import registration_networks_forget
    from apps.firewall.models import FirewallHost
    from apps.infra.redis import redis_client
    from apps.members.models import Member
    from apps.network.models import NetworkSettings

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    subprocess.run([*LAB, "up"], check=True, capture_output=True)
    info = json.loads((ROOT / "var/lab/lab.json").read_text())
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"captive-bench-{os.getpid()}.log"
    worker = web = None
    macs = [f"02:cc:00:00:00:{i:02x}" for i in range(1, ROUNDS + 1)]
    try:
        call_command("lab_register", no_devices=True, stdout=open(os.devnull, "w"))  # noqa: SIM115
        for entry in info["hosts"]:
            r = entry["resolver"]
            FirewallHost.objects.filter(name=entry["name"]).update(
                resolver_address=r["address"], unbound_control_socket=r["control_socket"],
                unbound_pid_file=r["pid_file"], unbound_user=r["user"],
            )  # fmt: skip
        member = Member.objects.filter(user__username="resident").get()
        RegistrationRange.objects.get_or_create(  # seed_demo gives most buildings one
            building=member.room.building, defaults={"network": "10.100.250.0/24"}
        )
        DhcpSettings.objects.update_or_create(id=1, defaults={
            "portal_addresses": "203.0.113.80", "registration_lease_seconds": 60,
            "captive_portal_url": "https://portal.dorm.example.org/api/captive-portal/",
            "resolver_forwarders": info["dns_upstream"], "resolver_ratelimit": 1000,
        })  # fmt: skip
        registration_networks_forget()
        NetworkSettings.objects.filter(pk=1).update(device_limit=100)
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
        web = subprocess.Popen(["ip", "netns", "exec", "pl-inet", "python3", "-c", HTTP, PAGE])
        deadline = time.monotonic() + 60
        while "ready" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        api = APIClient()
        api.force_authenticate(member.user)
        anonymous = APIClient()

        def walled(address: str) -> bool:
            if not address[:1].isdigit():
                return False
            answer = anonymous.get("/api/captive-portal/", REMOTE_ADDR=address).json()
            return answer.get("captive") is True

        times = []
        for i, mac in enumerate(macs):
            got = lab("client", mac)
            for _ in range(50):
                if walled(got):
                    break
                time.sleep(0.2)
                got = lab("client-renew", mac)
            else:
                raise SystemExit(f"{mac} never got a walled address: {got}")
            started = time.monotonic()
            response = api.post("/api/devices/", {"name": f"cap-{i}", "mac": mac}, format="json")
            if response.status_code != 201:
                raise SystemExit(f"device {mac}: {response.status_code} {response.content[:200]}")
            address = response.json()["ipv4"]
            done = False
            while not done and time.monotonic() - started < 30:
                if lab("client-renew", mac) != address:
                    time.sleep(0.2)
                    continue
                captive = anonymous.get("/api/captive-portal/", REMOTE_ADDR=address).json()
                page = subprocess.run(
                    ["ip", "netns", "exec", "pl-c-" + mac.replace(":", ""), "curl", "-s",
                     "-m", "3", "http://www.example/"],
                    capture_output=True, text=True, timeout=10, check=False,
                ).stdout  # fmt: skip
                done = captive == {"captive": False} and page == PAGE
            times.append(time.monotonic() - started if done else float("inf"))
        ok = sorted(t for t in times if t != float("inf"))
        print(json.dumps({  # noqa: T201
            "rounds": ROUNDS, "done": len(ok),
            "p50": statistics.median(ok) if ok else None,
            "p95": ok[min(len(ok) - 1, int(0.95 * len(ok)))] if ok else None,
            "max": max(ok) if ok else None,
        }))  # fmt: skip
    finally:
        for mac in macs:
            lab("client-down", mac)
        for proc in (worker, web):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
        subprocess.run([*LAB, "down"], check=False, capture_output=True)


if __name__ == "__main__":
    main()
