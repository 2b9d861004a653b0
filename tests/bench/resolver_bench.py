"""The members' resolver under load: dnsperf from a member-side namespace against pl-nat1's
Unbound, cached and uncached names, with the portal's rule set on the firewall and nothing else;
then the same rule set compiled without the resolver in `dns4` (DNS tracked by conntrack: the
seeds' mistake), side by side in one run.

Run by tests/bench/run.py in a subprocess (root: it builds the lab); prints one JSON object.
No database: the rule set and Unbound's configuration come straight from the compiler
(`workers.ruleset`), loaded with `nft -f` and `unbound-ctl reload` as the agent would.
Unbound runs with the per-client limit off (one client measures the resolver, not the limit).
Method: dnsperf -v (each answer's latency; p95 from those), 4 clients, at most 200 queries
outstanding, 5 s per case; cached = one name asked again and again, uncached = a new name per
query (answered NXDOMAIN by pl-inet's authoritative server: every query a recursion).
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

from workers.ruleset import Host, Policy, Snapshot, compile_snapshot
from workers.ruleset.host import Resolver
from workers.ruleset.unbound import unbound_config

ROOT = Path(__file__).resolve().parents[2]
LAB = ["bash", str(ROOT / "deploy/lab/lab.sh")]
SERVER = "10.100.0.2"
CLIENT_NS = "pl-bench-dns"
CLIENT_ADDR = "10.100.7.7"
SECONDS = 5


def sh(*argv: str, timeout: float = 60, input: str | None = None) -> str:
    done = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout, check=False, input=input
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: {done.stderr or done.stdout}")
    return done.stdout


def snapshot(dns_untracked: bool) -> Snapshot:
    unbound_dir = ROOT / "var/lab/pl-nat1/unbound"
    return Snapshot(
        policy=Policy(dns_servers=(SERVER,) if dns_untracked else ()),
        host=Host(
            name="pl-nat1",
            uplink_interfaces=("inet0",),
            member_interfaces=("dorm0",),
            private_networks=("10.100.0.0/16",),
        ),
        resolver=Resolver(
            listen=(SERVER,),
            allow=("10.100.0.0/16",),
            ratelimit=0,
            forwarders=("203.0.113.53",),
            control_socket=str(unbound_dir / "unbound.ctl"),
            pid_file=str(unbound_dir / "unbound.pid"),
            username="",
        ),
    )


def client_up() -> None:
    sh("ip", "netns", "add", CLIENT_NS)
    sh("ip", "-n", CLIENT_NS, "link", "set", "lo", "up")
    sh("ip", "-n", "pl-dorm", "link", "add", "cbenchdns", "type", "veth", "peer", "name",
       "eth0", "netns", CLIENT_NS)  # fmt: skip
    sh("ip", "-n", "pl-dorm", "link", "set", "cbenchdns", "master", "br0", "up")
    sh("ip", "-n", CLIENT_NS, "addr", "add", f"{CLIENT_ADDR}/16", "dev", "eth0")
    sh("ip", "-n", CLIENT_NS, "link", "set", "eth0", "up")


def client_down() -> None:
    subprocess.run(["ip", "netns", "del", CLIENT_NS], capture_output=True, check=False)
    subprocess.run(
        ["ip", "-n", "pl-dorm", "link", "del", "cbenchdns"], capture_output=True, check=False
    )


def dnsperf(names: Path) -> dict[str, float]:
    out = sh(
        "ip", "netns", "exec", CLIENT_NS, "dnsperf", "-s", SERVER, "-d", str(names),
        "-l", str(SECONDS), "-c", "4", "-q", "200", "-t", "2", "-v",
        timeout=SECONDS + 60,
    )  # fmt: skip
    latencies = sorted(float(m) for m in re.findall(r"^> \S+ \S+ \S+ ([0-9.]+)$", out, re.M))
    qps = re.search(r"Queries per second:\s+([0-9.]+)", out)
    lost = re.search(r"Queries lost:\s+(\d+)", out)
    if not latencies or qps is None:
        raise SystemExit(f"dnsperf said nothing usable:\n{out[-2000:]}")
    return {
        "qps": float(qps.group(1)),
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p95_ms": latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))] * 1000,
        "lost": int(lost.group(1)) if lost else 0,
    }


def conntrack_count() -> int:
    return int(sh("ip", "netns", "exec", "pl-nat1", "conntrack", "-C").strip() or 0)


def main() -> None:
    sh(*LAB, "up", timeout=180)
    tmp = Path(tempfile.mkdtemp(prefix="resolver-bench-"))
    results: dict[str, dict[str, float]] = {}
    try:
        conf = ROOT / "var/lab/pl-nat1/unbound/unbound.conf"
        client_up()
        cached = tmp / "cached"
        cached.write_text("www.example A\n")
        for mode, untracked in (("untracked", True), ("tracked", False)):
            snap = snapshot(untracked)
            sh("ip", "netns", "exec", "pl-nat1", "nft", "-f", "-", input=compile_snapshot(snap).nft)
            conf.write_text(unbound_config(snap))
            # A fresh Unbound per mode: the uncached names below are new to it.
            sh("ip", "netns", "exec", "pl-nat1", "unbound-control", "-c", str(conf), "stop")
            sh("ip", "netns", "exec", "pl-nat1", "/run/portal-lab/lib/unbound-ctl", "reload",
               str(conf))  # fmt: skip
            sh("ip", "netns", "exec", "pl-nat1", "conntrack", "-F")
            uncached = tmp / f"uncached-{mode}"
            uncached.write_text("".join(f"n{mode}{i}.example A\n" for i in range(300_000)))
            results[f"{mode}_cached"] = dnsperf(cached)
            results[f"{mode}_cached"]["conntrack_entries"] = conntrack_count()
            results[f"{mode}_uncached"] = dnsperf(uncached)
            results[f"{mode}_uncached"]["conntrack_entries"] = conntrack_count()
        print(json.dumps(results))  # noqa: T201
    finally:
        client_down()
        subprocess.run([*LAB, "down"], check=False, capture_output=True)


if __name__ == "__main__":
    main()
