"""From an API call to a working forward, through the real pipeline and the lab firewalls.

Run by tests/bench/run.py in a subprocess (root: it builds the lab) with DATABASE_URL set to a
scratch database and its own Redis database; prints one JSON object.
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
SERVER = """
import socket, sys, select, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 80))
s.listen(256)
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    if select.select([s], [], [], 0.5)[0]:
        conn, _ = s.accept()
        conn.sendall(b"ok")
        conn.close()
"""
PROBE = """
import socket, sys, time
address = sys.argv[1]
for line in sys.stdin:  # one port per line: try it every 10 ms until it answers (30 s at most)
    port, deadline, when = int(line), time.monotonic() + 30, -1.0
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=0.1) as s:
                if s.recv(10) == b"ok":
                    when = time.monotonic()  # CLOCK_MONOTONIC: the same clock as the bench's
                    break
        except OSError:
            pass
        time.sleep(0.01)
    print(when, flush=True)
"""
CLIENT = """
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=0.3)
    print(s.recv(10).decode())
except OSError:
    print("no")
"""


def answers(public: str, port: int) -> bool:
    out = subprocess.run(
        ["ip", "netns", "exec", "pl-inet", "python3", "-c", CLIENT, public, str(port)],
        capture_output=True,
        text=True,
        timeout=5,
        check=False,
    )
    return out.stdout.strip() == "ok"


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from rest_framework.test import APIClient

    from apps.firewall.models import FirewallHost, RuleSetVersion
    from apps.firewall.selectors import live_states
    from apps.network.models import NetworkSettings, PortForward
    from apps.network.ports import PortRange
    from apps.network.services import port_forward_create
    from tests.factories import device_add, member_active

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    subprocess.run([*LAB, "up"], check=True, capture_output=True)
    try:
        run(
            call_command,
            APIClient,
            FirewallHost,
            RuleSetVersion,
            live_states,
            NetworkSettings,
            PortForward,
            PortRange,
            port_forward_create,
            device_add,
            member_active,
        )
    finally:
        subprocess.run([*LAB, "down"], check=False, capture_output=True)


def run(
    call_command,
    APIClient,
    FirewallHost,
    RuleSetVersion,
    live_states,
    NetworkSettings,
    PortForward,
    PortRange,
    port_forward_create,
    device_add,
    member_active,
):
    """The measurements (the lab is up)."""
    call_command("lab_register", no_devices=True, stdout=open(os.devnull, "w"))  # noqa: SIM115
    NetworkSettings.objects.filter(pk=1).update(port_forward_limit=500)
    member = member_active()
    device = device_add(member, "bench")
    public = member.public_ipv4.address
    subprocess.run([*LAB, "device-add", device.ipv4], check=True, capture_output=True)
    call_command("firewall_push", now=True, stdout=open(os.devnull, "w"))  # noqa: SIM115
    server = subprocess.Popen(
        ["ip", "netns", "exec", "pl-dorm", "python3", "-c", SERVER, device.ipv4]
    )
    worker = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("celery")),
            "-A",
            "portal",
            "worker",
            "--pool",
            "solo",
            "--purge",
            "--without-mingle",
            "--without-gossip",
            "-l",
            "WARNING",
        ],
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    from django.conf import settings

    result: dict[str, object] = {"debounce": settings.PORTAL_FIREWALL_DEBOUNCE}
    try:
        time.sleep(4)  # the worker connects (and purged what was queued before it ran)
        from apps.firewall.pipeline import SCHEDULED_KEY
        from portal.redis import redis_client

        redis_client().delete(SCHEDULED_KEY)
        client = APIClient()
        client.force_authenticate(member.user)
        # One long-running probe in pl-inet (no interpreter start per try): it reports the
        # moment a port first answers, to within about 10 ms plus one refused try's timeout.
        probe = subprocess.Popen(
            ["ip", "netns", "exec", "pl-inet", "/usr/bin/python3", "-c", PROBE, public],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        latencies = []
        for n in range(20):
            port = 9000 + n
            started = time.monotonic()
            response = client.post(
                "/api/port-forwards/",
                {
                    "device": device.pk,
                    "protocol": "tcp",
                    "public_ports": str(port),
                    "target_ports": "80",
                },
                format="json",
            )
            assert response.status_code == 201, response.content
            probe.stdin.write(f"{port}\n")
            probe.stdin.flush()
            answered = float(probe.stdout.readline())
            latencies.append(answered - started if answered > 0 else 30.0)
        probe.stdin.close()
        probe.wait(timeout=10)
        result["each"] = [round(x, 2) for x in latencies]
        latencies.sort()
        result["p50"] = statistics.median(latencies)
        result["p95"] = latencies[int(0.95 * (len(latencies) - 1))]
        result["max"] = latencies[-1]

        host = FirewallHost.objects.order_by("rollout_order").first()
        before = RuleSetVersion.objects.filter(host=host).count()
        started = time.monotonic()
        created = []
        for n in range(200):
            created.append(
                port_forward_create(
                    member=member,
                    device=device,
                    protocol="tcp",
                    public_ports=PortRange(20000 + n, 20000 + n),
                    target_ports=PortRange(80, 80),
                    actor=member.user,
                )
            )
        result["burst_seconds_to_create"] = time.monotonic() - started
        ids = [f.pk for f in created]
        while True:
            rows = PortForward.objects.filter(pk__in=ids).values_list("pk", "updated_at")
            states = live_states(changed_at=dict(rows))
            if all(s.state == "live" for s in states.values()):
                break
            if time.monotonic() - started > 60:
                break
            time.sleep(0.1)
        result["burst_all_live"] = time.monotonic() - started
        result["burst_answering"] = all(answers(public, 20000 + n) for n in (0, 99, 199))
        result["burst_rollouts"] = RuleSetVersion.objects.filter(host=host).count() - before
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        server.kill()
        server.wait(timeout=5)
    print(json.dumps(result))  # noqa: T201


if __name__ == "__main__":
    main()
