"""The forward chain drops by default and names every allowed path: nothing from pl-inet or
pl-dorm reaches the sync link or the management link through a host, a management source
address arriving from outside is a spoof, and mid-stream TCP of an unknown connection is invalid
(nf_conntrack_tcp_loose = 0) instead of a new entry."""

from __future__ import annotations

import pytest
from lab_support import in_ns, lab_sh, reset_host

from workers.ruleset import compile_snapshot
from workers.ruleset import snapshot as s

pytestmark = pytest.mark.lab

DEVICE = "10.100.1.23"
SEND = """
import socket, sys
for port in range(int(sys.argv[3]), int(sys.argv[3]) + 20):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if sys.argv[1] != "-":
        u.bind((sys.argv[1], 0))
    try:
        u.sendto(b"probe", (sys.argv[2], port))
    except OSError:
        pass
"""
PROBE_TABLE = "pl_probe"


def compiled(host: str) -> str:
    member = s.Member(
        id=1,
        public_ipv4="198.51.100.23",
        devices=(s.Device(id=10, ipv4=DEVICE, ipv6=("2001:db8:100:1::23",)),),
    )
    snapshot = s.Snapshot(
        policy=s.Policy(management_networks=("10.255.255.0/28",)),
        host=s.Host(
            name=host,
            uplink_interfaces=("inet0",),
            member_interfaces=("dorm0",),
            management_interfaces=("mgmt0",),
            private_networks=("10.100.0.0/16",),
            public_networks=("198.51.100.0/24",),
        ),
        members=(member,),
    )
    return compile_snapshot(snapshot).nft


def probe(ns: str, match: str) -> None:
    """A counter in `ns` of UDP probes (ports 40000-40099) that `match` (an nft expression)."""
    in_ns(ns, "nft", "delete", "table", "inet", PROBE_TABLE)
    rules = (
        f"table inet {PROBE_TABLE} {{\n chain input {{\n"
        "  type filter hook prerouting priority -300; policy accept;\n"
        f"  {match} udp dport 40000-40099 counter\n }}\n}}\n"
    )
    assert in_ns(ns, "nft", "-f", "-", input=rules).returncode == 0


def probed(ns: str) -> int:
    out = in_ns(ns, "nft", "list", "table", "inet", PROBE_TABLE).stdout
    return int(out.split("packets", 1)[1].split()[0])


def dropped_by_policy(host: str) -> int:
    out = in_ns(host, "nft", "list", "chain", "inet", "portal_fw", "forward").stdout
    line = next(ln for ln in out.splitlines() if "no allowed path" in ln)
    return int(line.split("packets", 1)[1].split()[0])


@pytest.fixture
def paths(lab):
    for host in ("pl-nat1", "pl-nat2"):
        reset_host(host)
        assert in_ns(host, "nft", "-f", "-", input=compiled(host)).returncode == 0
    assert lab_sh("device-add", DEVICE).returncode == 0
    routes = ("10.255.254.0/30", "10.255.255.0/28")
    for net in routes:  # pl-inet tries the lab's inner links through pl-nat1
        in_ns("pl-inet", "ip", "route", "replace", net, "via", "203.0.113.1", "dev", "br0")
    try:
        yield
    finally:
        for net in routes:
            in_ns("pl-inet", "ip", "route", "del", net)
        in_ns("pl-inet", "ip", "addr", "del", "10.255.255.5/32", "dev", "br0")
        in_ns("pl-inet", "ip", "route", "replace", "10.100.0.0/16", "via", "203.0.113.1")
        in_ns("pl-nat2", "ip", "route", "del", DEVICE)
        in_ns("pl-nat1", "ip", "route", "del", f"{DEVICE}/32")
        for ns in ("pl-nat2", "pl-dorm"):
            in_ns(ns, "nft", "delete", "table", "inet", PROBE_TABLE)
        lab_sh("device-del", DEVICE)
        for host in ("pl-nat1", "pl-nat2"):
            reset_host(host)


def test_the_lab_hosts_pick_up_no_mid_stream_tcp(lab):
    for host in ("pl-nat1", "pl-nat2"):
        loose = in_ns(host, "sysctl", "-n", "net.netfilter.nf_conntrack_tcp_loose").stdout
        assert loose.strip() == "0"


def test_nothing_from_the_internet_or_the_members_reaches_the_sync_or_management_links(paths):
    # pl-nat2's ends of the sync and management links, reached through pl-nat1.
    probe("pl-nat2", 'iifname { "pl-sync", "mgmt0" }')
    before = dropped_by_policy("pl-nat1")
    for target, port in (("10.255.254.2", "40000"), ("10.255.255.12", "40020")):
        in_ns("pl-inet", "python3", "-c", SEND, "-", target, port)
        in_ns("pl-dorm", "python3", "-c", SEND, DEVICE, target, str(int(port) + 40))
    assert probed("pl-nat2") == 0
    assert dropped_by_policy("pl-nat1") - before == 80  # every probe, counted


def test_a_management_address_from_the_internet_side_is_a_spoof(paths):
    probe("pl-dorm", f"ip daddr {DEVICE}")
    in_ns("pl-inet", "ip", "addr", "add", "10.255.255.5/32", "dev", "br0")
    in_ns("pl-inet", "ip", "route", "replace", "10.100.0.0/16", "via", "203.0.113.1", "dev", "br0")
    in_ns("pl-inet", "python3", "-c", SEND, "10.255.255.5", DEVICE, "40000")
    assert probed("pl-dorm") == 0
    # The management network from its own link does reach the device.
    in_ns("pl-nat1", "ip", "route", "replace", "10.100.1.23/32", "dev", "dorm0")
    import subprocess

    subprocess.run(  # from the root namespace's end of pl-mgmt (the portal's side), via pl-nat1
        [
            "ip",
            "netns",
            "exec",
            "pl-nat2",
            "ip",
            "route",
            "replace",
            DEVICE,
            "via",
            "10.255.255.11",
        ],
        check=False,
    )
    in_ns("pl-nat2", "python3", "-c", SEND, "10.255.255.12", DEVICE, "40020")
    assert probed("pl-dorm") == 20


ACK = """
import socket, struct, sys
src, dst, dport = sys.argv[1], sys.argv[2], int(sys.argv[3])
def csum(data):
    if len(data) % 2:
        data += b"\\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
for sport in range(41000, 41020):  # mid-stream ACKs of connections nobody opened
    tcp = struct.pack("!HHIIBBHHH", sport, dport, 1000, 2000, 5 << 4, 0x10, 65535, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", csum(pseudo + tcp)) + tcp[18:]
    raw.sendto(tcp, (dst, 0))
"""


def invalid_drops(host: str) -> int:
    out = in_ns(host, "nft", "list", "chain", "inet", "portal_fw", "forward").stdout
    line = next(ln for ln in out.splitlines() if "ct state invalid" in ln)
    return int(line.split("packets", 1)[1].split()[0])


def test_members_reach_the_internet_and_a_mid_stream_ack_creates_no_entry(paths):
    probe("pl-inet", "ip saddr 198.51.100.23")
    in_ns("pl-dorm", "python3", "-c", SEND, DEVICE, "203.0.113.10", "40000")
    assert probed("pl-inet") == 20  # SNATed to the member's public address: the path works

    # ACKs from the Internet side to the device of connections nobody opened: invalid with
    # nf_conntrack_tcp_loose = 0, dropped and counted, and no conntrack entry made for them.
    in_ns("pl-inet", "ip", "route", "replace", "10.100.0.0/16", "via", "203.0.113.1")
    before = invalid_drops("pl-nat1")
    in_ns("pl-inet", "python3", "-c", ACK, "203.0.113.10", DEVICE, "2323")
    assert invalid_drops("pl-nat1") - before == 20
    entries = in_ns("pl-nat1", "cat", "/proc/net/nf_conntrack").stdout
    assert "dport=40000 " in entries  # the table lists the members' flows ...
    assert "dport=2323 " not in entries  # ... and nothing for the ACKs
