"""The HA pair under load: forwarding gap over 10 failovers and 10 failbacks with 1,000 flows,
connections lost, and conntrackd's sync load at a steady 10,000 new connections per second.

Run by tests/bench/run.py in a subprocess (root: it builds the lab) with DATABASE_URL set to a
scratch database; prints one JSON object.

Method. The lab is registered as a pair (lab_register) and the portal pushes every bundle, so
keepalived and conntrackd run the portal's configuration. A member with a device, a port
forward and an IPv6 opening; 1,000 flows (tests/e2e/lab/flows.py: 600 SNAT TCP, 200 DNAT TCP,
150 IPv6 TCP, 50 UDP), each sending a line and waiting for its echo every 100 ms. A failover is
`lab.sh host-down nat1` (its links go down; VRRP moves both roles to pl-nat2), a failback is
`host-up` plus the return of the roles (preempt after 2 s). The gap of an event is the longest
silence any flow saw that began within 3 s of it (a silence: more than 0.3 s between two
echoes, the 0.1 s interval included). Sync load: hping3 in pl-dorm sends 30,000 UDP packets,
each from a new source port (a new conntrack entry through SNAT), at 10,000 per second; the
messages pl-nat1's conntrackd sent and its CPU time over those 3 s.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import django

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e" / "lab"))
LAB = ["bash", str(ROOT / "deploy/lab/lab.sh")]
EVENTS = 10


def lab(*args: str) -> str:
    out = subprocess.run([*LAB, *args], capture_output=True, text=True, timeout=60, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"lab.sh {' '.join(args)}: {out.stderr.strip()[-300:]}")
    return out.stderr.strip()


def ha_status(host: str) -> dict:
    out = subprocess.run([*LAB, "ha-status", host], capture_output=True, text=True, timeout=30)
    return json.loads(out.stdout)


def conntrackd_cpu_seconds(host: str) -> float:
    """utime + stime of the conntrackd in `host`'s namespace."""
    mine = os.stat(f"/run/netns/pl-{host}").st_ino
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "conntrackd":
                continue
            if os.stat(entry / "ns" / "net").st_ino != mine:
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            continue
    raise RuntimeError(f"no conntrackd in pl-{host}")


def commit_done_ms(log: Path, since: dt.datetime) -> float:
    """Milliseconds from `since` until pl-nat2 had committed pl-nat1's connection states after
    becoming IPv4 primary (its notify.log: the "ipv4 -> MASTER" line, then "conntrackd -c")."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        master = None
        for line in log.read_text().splitlines():
            stamp, _, rest = line.partition(" ")
            at = dt.datetime.fromisoformat(stamp)
            if at < since:
                continue
            if rest.startswith("ipv4 -> MASTER"):
                master = at
            elif master is not None and rest.startswith("conntrackd -c:"):
                return (at - since).total_seconds() * 1000
        time.sleep(0.1)
    return float("nan")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.core.management import call_command
    from flows import Traffic

    from apps.network.ports import PortRange
    from apps.network.services import ipv6_opening_create, port_forward_create
    from tests.factories import device_add, member_active

    subprocess.run([*LAB, "up"], check=True, capture_output=True)
    devnull = open(os.devnull, "w")  # noqa: SIM115
    call_command("lab_register", no_devices=True, stdout=devnull)
    member = member_active()
    device = device_add(member, "bench-server")
    port_forward_create(
        member=member, device=device, protocol="tcp", public_ports=PortRange.parse("8080"),
        target_ports=PortRange.parse("8080"), actor=None,
    )  # fmt: skip
    ipv6_opening_create(device=device, protocol="tcp", ports=PortRange.parse("8443"), actor=None)
    lab("device-add", device.ipv4, device.ipv6)
    call_command("firewall_push", now=True, stdout=devnull)
    tmp = Path(tempfile.mkdtemp(prefix="ha-bench-"))
    traffic = Traffic(member.public_ipv4.address, device.ipv4, device.ipv6, tmp)
    failovers: list[float] = []
    failbacks: list[float] = []
    takeover_ms: list[float] = []
    restored_ms: list[float] = []
    try:
        deadline = time.monotonic() + 30
        while ha_status("nat2")["conntrackd"]["stats"]["external_active"] < 800:
            if time.monotonic() > deadline:
                raise RuntimeError("pl-nat2 never held pl-nat1's connection states")
            time.sleep(0.5)
        nat2_log = ROOT / "var/lab/pl-nat2/ha/notify.log"
        for _ in range(EVENTS):
            failovers.append(time.monotonic())
            wall = dt.datetime.now(dt.UTC)
            said = lab("host-down", "nat1")
            restored_ms.append(commit_done_ms(nat2_log, wall))
            takeover_ms.append(float(said.split(" took over in ")[1].split(" ms")[0]))
            time.sleep(1.5)
            lab("host-up", "nat1")
            failbacks.append(time.monotonic())
            lab("failback")
            time.sleep(1.5)
        time.sleep(1)
        result = traffic.finish()
        # Sync load: 10,000 new connections per second for 3 s, bounded (30,000 packets).
        before_msgs = ha_status("nat1")["conntrackd"]["stats"]["sent_packets"]
        before_cpu = conntrackd_cpu_seconds("nat1")
        started = time.monotonic()
        senders = [  # hping3 paces itself to about 2,000/s: five of them, 6,000 packets each
            subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    "pl-dorm",
                    "hping3",
                    "--udp",
                    "-p",
                    "9100",
                    "-s",
                    str(1024 + 12000 * i),
                    "-a",
                    device.ipv4,
                    "-i",
                    "u100",
                    "-c",
                    "6000",
                    "-q",
                    "203.0.113.10",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for i in range(5)
        ]
        for sender in senders:
            sender.wait(timeout=30)
        seconds = time.monotonic() - started
        time.sleep(1)  # conntrackd sends what the burst left in its queue
        after_msgs = ha_status("nat1")["conntrackd"]["stats"]["sent_packets"]
        after_cpu = conntrackd_cpu_seconds("nat1")
    finally:
        traffic.close()
        subprocess.run([*LAB, "failback"], capture_output=True, timeout=60, check=False)

    silences = [tuple(s) for flows in result.values() for s in flows["silences"]]

    def gap(at: float) -> float:
        seen = [d for start, d in silences if at - 0.3 <= start <= at + 3]
        return max(seen, default=0.1)

    lost = sum(f["resets"] + f["silent"] + f["failed"] for f in result.values())
    print(  # noqa: T201
        json.dumps(
            {
                "flows": sum(f["opened"] for f in result.values()),
                "lost": lost,
                "failover_gaps": [round(gap(t), 3) for t in failovers],
                "failback_gaps": [round(gap(t), 3) for t in failbacks],
                "failover_p50": statistics.median(gap(t) for t in failovers),
                "failover_p95": percentile([gap(t) for t in failovers], 0.95),
                "failback_p50": statistics.median(gap(t) for t in failbacks),
                "failback_p95": percentile([gap(t) for t in failbacks], 0.95),
                "takeover_ms_p50": statistics.median(takeover_ms),
                "restored_ms": [round(x) for x in restored_ms],
                "restored_ms_p50": statistics.median(restored_ms),
                "restored_ms_p95": percentile(restored_ms, 0.95),
                "udp_failover_p95": percentile(
                    [
                        max(
                            [
                                d
                                for a, d in map(tuple, result["udp"]["silences"])
                                if t - 0.3 <= a <= t + 3
                            ],
                            default=0.1,
                        )
                        for t in failovers
                    ],
                    0.95,
                ),
                "sync_seconds": round(seconds, 2),
                "sync_new_per_second": round(30000 / seconds),
                "sync_messages_per_second": round((after_msgs - before_msgs) / (seconds + 1)),
                "conntrackd_cpu_percent": round(100 * (after_cpu - before_cpu) / (seconds + 1), 1),
            }
        )
    )


if __name__ == "__main__":
    main()
