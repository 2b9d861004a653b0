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

    from apps.firewall.live import live_states
    from apps.firewall.models import FirewallHost, RuleSetVersion
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


def _bench_member(Member, buildings=None):
    """A networked seed_demo member with a public IPv4 and a device outside the lab's own
    10.100.0.0/16 and management ranges (demo data, PORTAL_BENCH_DEMO: seed_demo puts small
    runs into the lab's ranges, so a device in 10.100.0.0/16 is what it uses); with
    `buildings`, one living in them (the lab pair's site)."""
    import ipaddress

    lab = [ipaddress.ip_network("10.255.0.0/16")]
    if not os.environ.get("PORTAL_BENCH_DEMO"):
        lab.append(ipaddress.ip_network("10.100.0.0/16"))
    members = Member.objects.filter(status="active", public_ipv4__isnull=False)
    if buildings is not None:
        members = members.filter(room__building__in=buildings)
    for member in members.select_related("public_ipv4").order_by("id")[:200]:
        for device in member.devices.exclude(ipv4=None).order_by("id"):
            address = ipaddress.ip_address(device.ipv4)
            if not any(address in net for net in lab):
                return member, device
    raise SystemExit("no seeded member with a public IPv4 and a device outside the lab ranges")


def _routes(device_ipv4: str, public: str) -> None:
    """Inside the lab only: the device on the member side, the bench ranges routed to it."""
    ns = ["ip", "-n"]
    subprocess.run(
        [*ns, "pl-dorm", "addr", "replace", f"{device_ipv4}/32", "dev", "br0"], check=True
    )
    for host in ("pl-nat1", "pl-nat2"):
        subprocess.run([*ns, host, "route", "replace", "10.0.0.0/8", "dev", "dorm0"], check=True)
    subprocess.run(
        [*ns, "pl-inet", "route", "replace", "198.18.0.0/15", "via", "203.0.113.1", "dev", "br0",
         "src", "203.0.113.10"],
        check=True,
    )  # fmt: skip


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
    *,
    prepare=None,
    finish=None,
):
    """The measurements (the lab is up; the database holds seed_demo's 20,000 members).
    `prepare`, when given, runs once the lab's hosts are registered and returns the buildings
    the bench member lives in and figures for the result (tests/bench/sites_pipeline_bench.py:
    the lab pair becomes one site's, the other sites' hosts are loaded); `finish`, when given,
    returns figures read right before the result is printed."""
    from apps.firewall.models import Site
    from apps.members.models import Member

    call_command("lab_register", no_devices=True, stdout=open(os.devnull, "w"))  # noqa: SIM115
    # seed_demo's devices live in 10.1-10.80.x.x, outside the lab contract's 10.100.0.0/16: the
    # site's member network spans them, so every device is a DHCP reservation of the bundle.
    Site.objects.update(member_network4="10.0.0.0/8", gateway4="10.100.0.1")
    NetworkSettings.objects.filter(pk=1).update(port_forward_limit=500)
    buildings, prepared = prepare() if prepare else (None, {})
    member, device = _bench_member(Member, buildings)
    public = member.public_ipv4.address
    _routes(device.ipv4, public)
    started = time.monotonic()
    call_command("firewall_push", now=True, stdout=open(os.devnull, "w"))  # noqa: SIM115
    result: dict[str, object] = {"full_push": time.monotonic() - started, **prepared}
    result["members"] = Member.objects.filter(status__in=("active", "test")).count()
    server = subprocess.Popen(
        ["ip", "netns", "exec", "pl-dorm", "python3", "-c", SERVER, device.ipv4]
    )
    from apps.infra.redis import redis_client

    stale = list(redis_client().scan_iter("portal:firewall:*"))
    if stale:
        redis_client().delete(*stale)
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"pipeline-bench-{os.getpid()}.log"
    # The firewall worker as production runs it (one process, threads), started right before
    # the first change: that change pays whatever a (re)start costs.
    worker_started = time.monotonic()
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "apps.infra.handover",  # as deploy/systemd and the Procfile run it
            "--",
            str(Path(sys.executable).with_name("celery")),
            "-A",
            "portal",
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
        ],
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=open(log, "w"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )
    from django.conf import settings

    result["debounce"] = settings.PORTAL_FIREWALL_DEBOUNCE
    try:
        deadline = time.monotonic() + 90
        while "ready" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        # The worker takes tasks once its warm-up (read, compile both hosts, connect) is done.
        result["worker_ready_seconds"] = time.monotonic() - worker_started
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
        latencies, api_seconds = [], []
        from django.utils import timezone

        first_change_at = timezone.now()
        changes_log_at = len(log.read_text())
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
            api_seconds.append(time.monotonic() - started)
            probe.stdin.write(f"{port}\n")
            probe.stdin.flush()
            answered = float(probe.stdout.readline())
            latencies.append(answered - started if answered > 0 else 30.0)
        probe.stdin.close()
        probe.wait(timeout=10)
        result["each"] = [round(x, 2) for x in latencies]
        result["api_p50"] = statistics.median(api_seconds)  # the POST itself, in this process
        result["first"] = latencies[0]
        latencies.sort()
        result["p50"] = statistics.median(latencies)
        result["p95"] = latencies[int(0.95 * (len(latencies) - 1))]
        result["max"] = latencies[-1]
        result["profile"] = _profile(first_change_at)
        result["profile"].update(_run_phases(_synced(log, changes_log_at)))
        result["loadavg"] = os.getloadavg()
        worker = _restart(worker, log, result, client, device, public)
        if os.environ.get("PORTAL_BENCH_NO_BURST"):
            return
        host = FirewallHost.objects.order_by("rollout_order").first()
        before = RuleSetVersion.objects.filter(host=host).count()
        log_at = len(log.read_text())
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
        result["burst_runs"] = _synced(log, log_at)  # the burst's profile: each run's phases
        result["worker_log_tail"] = log.read_text()[-1500:] if result["p95"] > 2 else ""
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        server.kill()
        server.wait(timeout=5)
        if not os.environ.get("PORTAL_BENCH_KEEP_LOG"):  # set it to read the worker's timings
            log.unlink(missing_ok=True)
        if finish:
            result.update(finish())
        print(json.dumps(result))  # noqa: T201


def _restart(worker, log: Path, result: dict, client, device, public: str):
    """The first change after a firewall worker restart, as an operator restarts it: SIGHUP to
    the handover supervisor (`systemctl reload portal-firewall`; apps/infra/handover.py), which
    starts a new worker and stops the old one once the new one is warm; a forward created right
    at that moment; time from that API call to the forward answering, and from the reload to
    the new worker taking tasks."""
    import signal

    readies = log.read_text().count(" ready.")
    started = time.monotonic()
    worker.send_signal(signal.SIGHUP)
    response = client.post(
        "/api/port-forwards/",
        {"device": device.pk, "protocol": "tcp", "public_ports": "9100", "target_ports": "80"},
        format="json",
    )
    assert response.status_code == 201, response.content
    probe = subprocess.run(
        ["ip", "netns", "exec", "pl-inet", "/usr/bin/python3", "-c", PROBE, public],
        input="9100\n", capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    answered = float(probe.stdout.strip() or -1)
    result["restart_first"] = answered - started if answered > 0 else 30.0
    deadline = time.monotonic() + 90
    while log.read_text().count(" ready.") <= readies and time.monotonic() < deadline:
        time.sleep(0.05)
    result["restart_ready_seconds"] = time.monotonic() - started
    # Where the restart's time goes: the worker's own log (workers/firewall.py).
    result["restart_warm"] = _logged(log, "firewall.warm_wait")
    result["restart_warm_parts"] = str(_logged(log, "firewall.snapshot_cache_warm") or "")
    result["restart_catch_up"] = str(_logged(log, "firewall.handover_catch_up") or "")
    return worker


def _synced(log: Path, after: int) -> list[dict]:
    """The `seconds` of each firewall.synced line of the worker's log after character `after`
    (where a run's time went: read, delta/compile and push per host, texts, delta, ...)."""
    import ast
    import re

    runs = []
    for line in log.read_text()[after:].splitlines():
        if "firewall.synced" not in line:
            continue
        if line.lstrip().startswith("{"):
            runs.append(json.loads(line).get("seconds") or {})
        elif match := re.search(r"seconds=(\{[^}]*\})", line):
            runs.append(ast.literal_eval(match.group(1)))
    return runs


def _logged(log: Path, event: str):
    """`seconds` of the last `event` line of the worker's log (JSON or console lines)."""
    import ast
    import re

    found = None
    for line in log.read_text().splitlines():
        if event not in line:
            continue
        if line.lstrip().startswith("{"):
            found = json.loads(line).get("seconds")
        elif match := re.search(r"seconds=(\{[^}]*\}|[0-9.]+)", line):
            found = ast.literal_eval(match.group(1))
    return found


def _run_phases(runs: list[dict]) -> dict[str, float]:
    """Medians over the worker's site runs of each phase's seconds (`site_sync`'s timings:
    the database read, each host's delta or compile, the rollout, the whole run)."""
    phases: dict[str, list[float]] = {}
    for run in runs:
        for key, value in run.items():
            if key != "reused":
                phases.setdefault(key, []).append(float(value))
    return {f"worker run: {key}": statistics.median(v) for key, v in sorted(phases.items())}


def _profile(since) -> dict[str, float]:
    """Where one change's time goes, medians over the changes since `since`: the compile per
    host (RuleSetVersion.compile_seconds) and each push step per host (PushLogEntry.seconds;
    `apply` holds the agent's apply-bundle round trip, `confirm` its confirm)."""
    from apps.firewall.models import PushLogEntry, RuleSetVersion

    out: dict[str, float] = {}
    compiles = list(
        RuleSetVersion.objects.filter(created_at__gte=since).values_list(
            "compile_seconds", flat=True
        )
    )
    if compiles:
        out["compile (per host)"] = statistics.median(compiles)
    steps: dict[str, list[float]] = {}
    for host, step, seconds in PushLogEntry.objects.filter(at__gte=since).values_list(
        "host__name", "step", "seconds"
    ):
        steps.setdefault(f"{host} {step}", []).append(seconds)
    out.update({f"push {key}": statistics.median(v) for key, v in sorted(steps.items())})
    return out


if __name__ == "__main__":
    main()
