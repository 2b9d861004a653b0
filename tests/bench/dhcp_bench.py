"""DHCP benchmarks (issue 12) on synthetic snapshots: what the Kea artefact costs in the compile,
how long Kea takes to check and load it, how much memory it holds, how fast it answers.

    python -m tests.bench.dhcp_bench [--members 20000,100000] [--no-kea]

Methods:
* compile share: `compile_bundle` of the same synthetic snapshot (3 devices per member, each
  with a reservation) with and without the DHCP section; best of 3, in this process.
* Kea: a namespace ``pl-kb`` with a veth to ``pl-kbc`` (10.0.0.2/8 on the server side). One
  `kea-dhcp4 -t` of the file; Kea started with an empty configuration, then the full file loaded
  with `config-reload` over the control socket (`deploy/firewall/kea-ctl reload`), then reloaded
  again with one reservation changed (what a push of one device does); Kea's RSS after the load.
* request rate: `perfdhcp` (Debian's kea-admin) in ``pl-kbc``, offered 10,000/s, at most 30,000
  exchanges, 4-way (DORA), clients unknown to Kea (a /16 pool), with the reservations loaded.
Everything runs in namespaces of its own, bounded in time and count, and is removed in finally.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.bench.synthetic import synthetic_snapshot
from workers.ruleset.bundle import compile_bundle
from workers.ruleset.snapshot import Dhcp, Host, Snapshot

Row = tuple[str, str, float, str, str]
ROOT = Path(__file__).resolve().parents[2]
KEA_CTL = ROOT / "deploy" / "firewall" / "kea-ctl"
SERVER, CLIENT = "pl-kb", "pl-kbc"


def _mac(device_id: int) -> str:
    raw = (0x02 << 40) | device_id
    return ":".join(f"{(raw >> s) & 0xFF:02x}" for s in range(40, -8, -8))


def dhcp_snapshot(
    members: int, *, interface: str = "pl-dorm", state: Path | None = None
) -> Snapshot:
    snap = synthetic_snapshot(members)
    host = Host(
        name=snap.host.name,
        uplink_interfaces=snap.host.uplink_interfaces,
        member_interfaces=(interface,),
    )
    state = state or Path("/run/kea")
    dhcp = Dhcp(
        network="10.0.0.0/8",
        router="10.0.0.1",
        dns_servers=("203.0.113.53",),
        domain="dorm.example.org",
        pools=(("10.250.0.1", "10.250.255.254"),),
        reservations=tuple(
            (_mac(d.id), d.ipv4) for m in snap.members for d in m.devices if d.ipv4 is not None
        ),
        control_socket=str(state / "kea4.sock"),
        lease_file=str(state / "leases4.csv"),
    )
    return Snapshot(policy=snap.policy, host=host, members=snap.members, dhcp=dhcp)


def _best(func, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def compile_rows(members: int) -> list[Row]:
    with_dhcp = dhcp_snapshot(members)
    without = Snapshot(policy=with_dhcp.policy, host=with_dhcp.host, members=with_dhcp.members)
    compile_bundle(with_dhcp)  # warm the element caches like a running worker
    t_with = _best(lambda: compile_bundle(with_dhcp))
    t_without = _best(lambda: compile_bundle(without))
    text = compile_bundle(with_dhcp).artefacts["kea-dhcp4"]
    n = len(with_dhcp.dhcp.reservations)
    section = f"DHCP, {members:,} members ({n:,} reservations)"
    return [
        (section, "bundle compile with the Kea artefact", t_with, "s", ""),
        (section, "bundle compile without it", t_without, "s", ""),
        (
            section,
            "Kea artefact share of the compile",
            (t_with - t_without) / t_with * 100,
            "%",
            "",
        ),
        (section, "Kea configuration size", len(text) / 1e6, "MB", ""),
    ]


def _sh(*argv: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=check)


@contextmanager
def kea_namespaces() -> Iterator[None]:
    for ns in (SERVER, CLIENT):
        _sh("ip", "netns", "del", ns, check=False)
    try:
        for ns in (SERVER, CLIENT):
            _sh("ip", "netns", "add", ns)
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        _sh("ip", "-n", SERVER, "link", "add", "kb0", "type", "veth", "peer", "name", "eth0",
            "netns", CLIENT)  # fmt: skip
        _sh("ip", "-n", SERVER, "addr", "add", "10.0.0.2/8", "dev", "kb0")
        _sh("ip", "-n", SERVER, "link", "set", "kb0", "up")
        _sh("ip", "-n", CLIENT, "addr", "add", "10.254.0.1/8", "dev", "eth0")  # perfdhcp needs one
        _sh("ip", "-n", CLIENT, "link", "set", "eth0", "up")
        yield
    finally:
        for ns in (SERVER, CLIENT):
            pids = _sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                subprocess.run(["kill", "-9", pid], check=False)
            _sh("ip", "netns", "del", ns, check=False)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def kea_rows(members: int) -> list[Row]:
    section = f"DHCP, {members:,} members: Kea on the host"
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="kea-bench-") as tmp, kea_namespaces():
        state = Path(tmp)
        snap = dhcp_snapshot(members, interface="kb0", state=state)
        full = compile_bundle(snap).artefacts["kea-dhcp4"]
        conf = state / "kea-dhcp4.conf"
        empty = json.loads(full)
        empty["Dhcp4"]["subnet4"] = []
        conf.write_text(json.dumps(empty))
        start = time.perf_counter()
        check_file = state / "check.conf"
        check_file.write_text(full)
        checked = _sh(
            "ip", "netns", "exec", SERVER, "kea-dhcp4", "-t", str(check_file), check=False
        )
        rows.append(
            (section, "kea-dhcp4 -t (check before a push)", time.perf_counter() - start, "s", "")
        )
        if checked.returncode != 0:
            raise RuntimeError(checked.stderr[-500:])
        env = ["env", f"KEA_PIDFILE_DIR={tmp}", f"KEA_LOCKFILE_DIR={tmp}"]
        kea = subprocess.Popen(
            ["ip", "netns", "exec", SERVER, *env, "kea-dhcp4", "-c", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 20
            while not (state / "kea4.sock").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            conf.write_text(full)
            start = time.perf_counter()
            _sh(str(KEA_CTL), "reload", str(conf), timeout=300)
            rows.append(
                (
                    section,
                    "config-reload, empty -> all reservations",
                    time.perf_counter() - start,
                    "s",
                    "",
                )
            )
            pid = int(_sh("pgrep", "-n", "-f", f"kea-dhcp4 -c {conf}").stdout.split()[0])
            rows.append((section, "Kea RSS with all reservations", _rss_mb(pid), "MB", ""))
            changed = full.replace('"ip-address": "10.0.1.0"', '"ip-address": "10.0.0.9"', 1)
            conf.write_text(changed)
            start = time.perf_counter()
            _sh(str(KEA_CTL), "reload", str(conf), timeout=300)
            rows.append(
                (
                    section,
                    "config-reload, one reservation changed",
                    time.perf_counter() - start,
                    "s",
                    "",
                )
            )
            rows += perfdhcp_rows(section)
        finally:
            kea.terminate()
            try:
                kea.wait(timeout=10)
            except subprocess.TimeoutExpired:
                kea.kill()
    return rows


def perfdhcp_rows(section: str) -> list[Row]:
    if not shutil.which("perfdhcp"):
        return [(section, "perfdhcp not installed (package kea-admin)", 0, "", "")]
    out = _sh(
        "ip", "netns", "exec", CLIENT, "timeout", "20",
        "perfdhcp", "-4", "-l", "eth0", "-r", "10000", "-R", "60000", "-p", "5", "-n", "30000",
        "-b", "mac=02:aa:00:00:00:00",
        check=False, timeout=30,
    ).stdout  # fmt: skip
    rate = re.search(r"Rate:\s*([0-9.]+)\s*4-way exchanges/second", out)
    drops = re.search(r"drops:\s*(\d+)", out)
    return [
        (
            section,
            "perfdhcp DORA rate (unknown clients, offered 10,000/s, at most 30,000)",
            float(rate.group(1)) if rate else 0.0,
            "exchanges/s",
            "",
        ),
        (section, "perfdhcp drops", float(drops.group(1)) if drops else -1, "", ""),
    ]


def run_benchmarks(members: list[int], kea: bool = True) -> list[Row]:
    rows: list[Row] = []
    for n in members:
        rows += compile_rows(n)
        if kea:
            rows += kea_rows(n)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", default="20000,100000")
    parser.add_argument("--no-kea", action="store_true")
    args = parser.parse_args(argv)
    members = [int(x) for x in args.members.split(",")]
    for section, name, value, unit, target in run_benchmarks(members, kea=not args.no_kea):
        print(f"{section} | {name} | {value:.3f} {unit} {target}")  # noqa: T201


if __name__ == "__main__":
    ipaddress.IPv4Address("10.0.0.1")  # (stdlib only: the bench imports nothing of Django)
    sys.exit(main())
