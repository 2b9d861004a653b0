"""Issue 15, the early defences: malformed SYNs die at raw priority before conntrack sees them
(counted per reason), real clients still connect, and DNS with the network's resolvers bypasses
conntrack both ways. Senders are bounded (a few thousand packets) and stay inside the lab."""

from __future__ import annotations

import subprocess

import pytest
from lab_support import in_ns, lab_sh, reset_host

from workers.ruleset import compile_snapshot
from workers.ruleset import snapshot as s

pytestmark = pytest.mark.lab

DEVICE = "10.100.1.23"
PUBLIC = "198.51.100.23"
# A stand-in resolver of its own in pl-inet: 203.0.113.53 is the lab's authoritative server of
# the test zone (lab.sh), which this test must neither shadow nor take away at its end.
RESOLVER = "203.0.113.54"

SYNS = """
import random, socket, struct, sys
src, dst, dport, count, kind = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def csum(data):
    if len(data) % 2:
        data += b"\\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
for i in range(count):  # bounded: `count` packets, then done
    sport = 20000 + i % 40000
    window = 0 if kind == "window0" else 64240
    tcp = struct.pack("!HHIIBBHHH", sport, dport, random.getrandbits(32), 0, 5 << 4, 0x02, window, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", csum(pseudo + tcp)) + tcp[18:]
    raw.sendto(tcp, (dst, 0))
"""
SERVER = """
import socket, select, sys, time
tcp = socket.socket(); tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind((sys.argv[1], 80)); tcp.listen(64)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    if select.select([tcp], [], [], 0.2)[0]:
        c, _ = tcp.accept(); c.sendall(b"hello"); c.close()
"""
RESOLVER_ECHO = """
import socket, sys, time
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((sys.argv[1], 53)); u.settimeout(0.5)
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        data, peer = u.recvfrom(512)
    except TimeoutError:
        continue
    u.sendto(b"answer:" + data, peer)
"""
ASK = """
import socket, sys
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((sys.argv[1], 0)); u.settimeout(2)
got = 0
for i in range(int(sys.argv[3])):
    u.sendto(b"q%d" % i, (sys.argv[2], 53))
    try:
        if u.recvfrom(512)[0].startswith(b"answer:"):
            got += 1
    except TimeoutError:
        pass
print(got)
"""
CONNECT = """
import socket, sys
ok = 0
for _ in range(int(sys.argv[2])):
    try:
        with socket.create_connection((sys.argv[1], 8080), timeout=2) as c:
            ok += c.recv(10) == b"hello"
    except OSError:
        pass
print(ok)
"""


def compiled(host: str) -> str:
    member = s.Member(
        id=1,
        public_ipv4=PUBLIC,
        devices=(s.Device(id=10, ipv4=DEVICE),),
        forwards=(s.PortForward(1, "tcp", s.PortRange(8080, 8080), 10, s.PortRange(80, 80)),),
    )
    snapshot = s.Snapshot(
        policy=s.Policy(management_networks=("10.255.255.0/28",), dns_servers=(RESOLVER,)),
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


def early_counter(host: str, reason: str) -> int:
    out = "".join(  # spoofed sources in early, malformed TCP in its early_tcp
        in_ns(host, "nft", "list", "chain", "inet", "portal_fw", chain).stdout
        for chain in ("early", "early_tcp")
    )
    line = next(ln for ln in out.splitlines() if reason in ln)
    return int(line.split("packets", 1)[1].split()[0])


def conntrack_lines(host: str, needle: str) -> int:
    entries = in_ns(host, "cat", "/proc/net/nf_conntrack").stdout
    return sum(needle in line for line in entries.splitlines())


@pytest.fixture
def loaded(lab):
    for host in ("pl-nat1", "pl-nat2"):
        reset_host(host)
        assert in_ns(host, "nft", "-f", "-", input=compiled(host)).returncode == 0
        in_ns(host, "conntrack", "-F")  # (absent tool: entries age out; counts below are deltas)
    assert lab_sh("device-add", DEVICE).returncode == 0
    in_ns("pl-inet", "ip", "addr", "replace", f"{RESOLVER}/24", "dev", "br0")
    procs = [
        subprocess.Popen(["ip", "netns", "exec", "pl-dorm", "python3", "-c", SERVER, DEVICE]),
        subprocess.Popen(
            ["ip", "netns", "exec", "pl-inet", "python3", "-c", RESOLVER_ECHO, RESOLVER]
        ),
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=5)
        in_ns("pl-inet", "ip", "addr", "del", f"{RESOLVER}/24", "dev", "br0")
        lab_sh("device-del", DEVICE)
        for host in ("pl-nat1", "pl-nat2"):
            reset_host(host)


def test_a_malformed_syn_flood_creates_no_conntrack_entries_and_real_clients_connect(loaded):
    import time

    time.sleep(0.3)  # the servers listen
    before = conntrack_lines("pl-nat1", "dport=8080 ")
    window0 = early_counter("pl-nat1", "SYN with window 0")
    in_ns("pl-inet", "python3", "-c", SYNS, "203.0.113.10", PUBLIC, "8080", "3000", "window0",
          timeout=30)  # fmt: skip
    # (a SYN without options is what this sender makes anyway: 20-byte header, doff 5)
    assert early_counter("pl-nat1", "SYN with window 0") - window0 == 3000
    assert conntrack_lines("pl-nat1", "dport=8080 ") == before  # not one entry for them
    nooptions = early_counter("pl-nat1", "SYN without options")
    in_ns("pl-inet", "python3", "-c", SYNS, "203.0.113.10", PUBLIC, "8080", "3000", "plain",
          timeout=30)  # fmt: skip
    assert early_counter("pl-nat1", "SYN without options") - nooptions == 3000
    assert conntrack_lines("pl-nat1", "dport=8080 ") == before
    # A real client (its SYN carries options and a window) gets through the forward.
    ok = in_ns("pl-inet", "python3", "-c", CONNECT, PUBLIC, "20", timeout=60).stdout.strip()
    assert ok == "20"


def test_dns_with_the_networks_resolver_creates_no_conntrack_entries(loaded):
    import time

    time.sleep(0.3)
    answered = in_ns("pl-dorm", "python3", "-c", ASK, DEVICE, RESOLVER, "50", timeout=60)
    assert answered.stdout.strip() == "50"  # every query answered, through pl-nat1 both ways
    assert conntrack_lines("pl-nat1", f"dst={RESOLVER} ") == 0
