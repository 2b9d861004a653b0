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

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy" / "firewall"))
from portal_fw import kea as host_kea
from portal_fw.bundle import load_artefacts
from portal_fw.host import Host as AgentHost
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


def device_rows(members: int) -> list[Row]:
    """A device registered at `members`: the host's DHCP input built in full (every reservation
    and RA prefix parsed and checked, as a full compile does) against the last one with the
    device's row added (`Dhcp.with_devices`, the delta path); Kea's and portal-ra's texts
    rendered fresh against rendered from the lines of the last rendering (best of 3 each)."""
    import dataclasses

    from workers.ruleset import kea

    snap = dhcp_snapshot(members)
    d = snap.dhcp
    rows = [(mac, str(ip)) for mac, ip in d.reservations]
    ra = [(mac, f"2001:db8:{i >> 16:x}:{i & 0xFFFF:x}::/64") for i, (mac, _ip) in enumerate(rows)]
    fields = {f.name: getattr(d, f.name) for f in dataclasses.fields(Dhcp)}

    def full() -> Dhcp:
        return Dhcp(**{**fields, "reservations": tuple(rows), "ra_prefixes": tuple(ra)})

    t_full = _best(full)
    base = full()
    new = ("02:ee:00:00:00:01", "10.200.0.5")
    t_step = _best(lambda: base.with_devices(added=[new],
                                             ra_added=[(new[0], "2001:db8:ffff::/64")]))  # fmt: skip
    stepped = dataclasses.replace(snap, dhcp=base.with_devices(added=[new]))
    first = dataclasses.replace(snap, dhcp=base)

    def render(s: Snapshot, fresh: bool) -> None:
        if fresh:
            kea._KEA_ROWS.memo, kea._RA_ROWS.memo = {}, {}
        kea.kea_config.__wrapped__(s)
        kea.ra_config.__wrapped__(s)

    t_fresh = _best(lambda: render(first, True))

    def kept() -> None:
        render(first, False)  # the host's last rendering
        start = time.perf_counter()
        render(stepped, False)
        kept_times.append(time.perf_counter() - start)

    kept_times: list[float] = []
    for _ in range(3):
        kept()
    section = f"DHCP, {members:,} members: a device registered"
    return [
        (section, "DHCP input built in full (reservations and RA prefixes checked)", t_full,
         "s", ""),
        (section, "DHCP input stepped by the device's row (delta path)", t_step, "s", ""),
        (section, "Kea + portal-ra texts rendered fresh", t_fresh, "s", ""),
        (section, "Kea + portal-ra texts from the last rendering's lines (delta path)",
         min(kept_times), "s", ""),
    ]  # fmt: skip


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
            rows += lease_rows(section, state, conf, full, changed)
            rows += perfdhcp_rows(section)
        finally:
            kea.terminate()
            try:
                kea.wait(timeout=10)
            except subprocess.TimeoutExpired:
                kea.kill()
    return rows


LEASES_HEADER = (
    "address,hwaddr,client_id,valid_lifetime,expire,subnet_id,fqdn_fwd,fqdn_rev,hostname,"
    "state,user_context"
)


def lease_rows(section: str, state: Path, conf: Path, full: str, changed: str) -> list[Row]:
    """A reload as production sees it: every device holds its reserved address (one lease per
    reservation in Kea's lease file, which a config-reload reads again), one reservation
    changed; `kea-ctl reload` with the file Kea ran before (only the changed address is looked
    up) and without it (every lease read with lease4-get-all, as every reload did before)."""
    expire = int(time.time()) + 3600
    reserved = json.loads(full)["Dhcp4"]["subnet4"][0]["reservations"]
    lines = [LEASES_HEADER] + [
        f"{r['ip-address']},{r['hw-address']},,3600,{expire},1,0,0,,0," for r in reserved
    ]
    leases = state / "leases4.csv"
    fresh = state / "leases4.new"
    fresh.write_text("\n".join(lines) + "\n")
    fresh.replace(leases)  # a new file: Kea reads it at its next reload
    previous = state / "previous.conf"
    previous.write_text(changed)  # what Kea runs now
    conf.write_text(full)  # the reservation changed back
    start = time.perf_counter()
    _sh(str(KEA_CTL), "reload", str(conf), str(previous), timeout=300)
    with_previous = time.perf_counter() - start
    start = time.perf_counter()
    held = len(json.loads(_sh(str(KEA_CTL), "leases", str(conf), timeout=300).stdout)["leases"])
    get_all = time.perf_counter() - start
    conf.write_text(changed)
    start = time.perf_counter()
    _sh(str(KEA_CTL), "reload", str(conf), timeout=300)
    without = time.perf_counter() - start
    what = f"one reservation changed, {held:,} leases held"
    return [
        (section, f"kea-ctl reload, {what}: with the file Kea ran before", with_previous, "s",
         ""),
        (section, f"kea-ctl reload, {what}: without it (every lease read)", without, "s", ""),
        (section, f"lease4-get-all of {held:,} leases (kea-ctl leases)", get_all, "s", ""),
        *round_rows(section, state, conf, [r["ip-address"] for r in reserved], held),
    ]  # fmt: skip


def round_rows(section: str, state: Path, conf: Path, addresses: list[str], held: int) -> list[Row]:
    """The portal's 15 s lease round as the host's agent answers it (`dhcp-leases`, in this
    process): in full (no cursor: lease4-get-all), from the cursor with nothing changed, and
    from the cursor after 100 leases were renewed (lease4-update: a later expiry, one lease
    file line each); time of the verb and the bytes of its answer line."""
    declared = state / "artefacts.json"
    declared.write_text(json.dumps({"kea-dhcp4": {"path": str(conf), "check": ["true", "{file}"]}}))
    (state / "agent").mkdir(exist_ok=True)  # the agent's state directory (`--state-dir`)
    agent = AgentHost(state / "agent", "bench", artefacts_file=declared)
    agent.artefacts = load_artefacts(declared)
    sock = str(state / "kea4.sock")

    def one(args: dict) -> tuple[float, int, dict]:
        start = time.perf_counter()
        answer = host_kea.dhcp_leases(agent, args)
        line = json.dumps(answer, separators=(",", ":"))
        return time.perf_counter() - start, len(line), answer

    full_s, full_b, answer = one({})
    cursor = answer["cursor"]
    since = {"since_inode": cursor[0], "since_offset": cursor[1], "since_check": cursor[2]}
    same_s, same_b, answer = one(since)
    if answer["full"] or answer["leases"]:
        raise RuntimeError(f"nothing changed, yet the round sent {len(answer['leases'])} leases")
    expire = int(time.time()) + 7200
    for address in addresses[:: max(1, len(addresses) // 100)][:100]:
        host_kea.command(sock, "lease4-update", {
            "ip-address": address, "hw-address": _lease_mac(sock, address), "subnet-id": 1,
            "valid-lft": 3600, "expire": expire})  # fmt: skip
    hundred_s, hundred_b, answer = one(since)
    if answer["full"] or len(answer["leases"]) != 100:
        raise RuntimeError(f"100 renewed, the round sent {len(answer['leases'])} leases")
    what = f"a lease round (dhcp-leases), {held:,} leases held"
    return [*_plain_rows(section, what, (full_s, full_b, same_s, same_b, hundred_s, hundred_b)),
            *lfc_rows(section, what, state, (conf, agent), answer["cursor"], addresses, one)]  # fmt: skip


def _renew(sock: str, addresses: list[str]) -> None:
    expire = int(time.time()) + 7200
    for address in addresses:
        host_kea.command(sock, "lease4-update", {
            "ip-address": address, "hw-address": _lease_mac(sock, address), "subnet-id": 1,
            "valid-lft": 3600, "expire": expire})  # fmt: skip


def _lfc(sock: str, conf: Path) -> None:
    """One lease file cleanup of Kea 2.2 (lfc-interval 5 s until it ran, then the hour again):
    the lease file renamed to `.1`, a new one begun, kea-lfc merging `.2` and `.1` into `.2`."""
    leases = conf.with_name("leases4.csv")
    text = conf.read_text()
    inode = leases.stat().st_ino
    if '"lfc-interval": 3600' not in text:
        raise RuntimeError("the compiled Kea configuration no longer says lfc-interval 3600")
    conf.write_text(text.replace('"lfc-interval": 3600', '"lfc-interval": 5', 1))
    if host_kea.command(sock, "config-reload", timeout=300).get("result") != 0:
        raise RuntimeError("config-reload with lfc-interval 5 refused")
    deadline = time.monotonic() + 120
    while leases.stat().st_ino == inode and time.monotonic() < deadline:
        time.sleep(0.02)
    conf.write_text(text)
    while time.monotonic() < deadline:  # refused while kea-lfc runs (it cannot load the files)
        if host_kea.command(sock, "config-reload", timeout=300).get("result") == 0:
            return
        time.sleep(0.1)
    raise RuntimeError("Kea ran no lease file cleanup, or did not reload after it")


def lfc_rows(section: str, what: str, state: Path, paths: tuple[Path, AgentHost],
             cursor: list[int], addresses: list[str], one) -> list[Row]:  # fmt: skip
    """The round after Kea's lease file cleanup (issue 26): 100 leases renewed before it and
    100 after; the round reads the old file's rest (through the agent's link) and the new file.
    Then the same round with the old file gone (two LFCs since, or the agent's link lost): every
    file Kea loads at its start (`.2` and the new file). Before issue 26's LFC work, the round
    after an LFC was the full reading (lease4-get-all, row "in full"). Kea's configuration,
    rewritten here to start the LFC, is parsed by the agent before the round (it is once per
    pushed file; an LFC does not change it)."""
    conf, agent = paths
    sock = str(state / "kea4.sock")
    since = {"since_inode": cursor[0], "since_offset": cursor[1], "since_check": cursor[2]}
    step = max(1, len(addresses) // 100)
    _renew(sock, addresses[1::step][:100])
    _lfc(sock, conf)
    _renew(sock, addresses[2::step][:100])
    host_kea.kea_paths(agent, conf)
    lfc_s, lfc_b, answer = one(since)
    if answer.get("from") != "rotated" or len(answer["leases"]) != 200:
        raise RuntimeError(f"after the LFC: from {answer.get('from')}, "
                           f"{len(answer['leases'])} leases")  # fmt: skip
    link = state / f"leases4.csv.portal-{cursor[0]}"
    link.unlink()
    files_s, files_b, answer = one(since)
    if answer.get("from") != "files":
        raise RuntimeError(f"without the old file: from {answer.get('from')}")
    held = len(answer["leases"])
    return [
        (section, f"{what}: after Kea's LFC (100 renewed before it, 100 after): the old file's "
         "rest and the new file", lfc_s, "s", ""),
        (section, f"{what}: after Kea's LFC, answer size", lfc_b / 1e3, "kB", ""),
        (section, f"{what}: after two LFCs (the old file gone): every lease from Kea's files, "
         f"not from Kea ({held:,})", files_s, "s", ""),
        (section, f"{what}: after two LFCs, answer size", files_b / 1e6, "MB", ""),
    ]  # fmt: skip


def _plain_rows(section: str, what: str, figures: tuple[float, ...]) -> list[Row]:
    full_s, full_b, same_s, same_b, hundred_s, hundred_b = figures
    return [
        (section, f"{what}: in full (no cursor: lease4-get-all)", full_s, "s", ""),
        (section, f"{what}: in full, answer size", full_b / 1e6, "MB", ""),
        (section, f"{what}: from the cursor, nothing changed", same_s, "s", ""),
        (section, f"{what}: from the cursor, nothing changed, answer size", same_b / 1e3, "kB",
         ""),
        (section, f"{what}: from the cursor, 100 leases renewed", hundred_s, "s", ""),
        (section, f"{what}: from the cursor, 100 leases renewed, answer size", hundred_b / 1e3,
         "kB", ""),
    ]  # fmt: skip


def _lease_mac(sock: str, address: str) -> str:
    return host_kea.command(sock, "lease4-get", {"ip-address": address})["arguments"]["hw-address"]


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
        rows += device_rows(n)
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
