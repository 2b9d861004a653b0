"""Issue 15, the SYN proxy for forwarded TCP ports, in the lab: a client outside reaches the
device behind the port forward through the proxy (DNAT of the proxied connection included, data
both ways), and a spoofed SYN flood at the forward creates no conntrack entry and never reaches
the device while other clients keep connecting. Senders are bounded (at most 2 s and 380,000 packets)
and stay inside the lab."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from lab_support import in_ns, lab_sh, reset_host
from test_flood_quota import (
    SERVER,
    conntrack_count,
    flood_senders,
    flood_start,
    flood_wait,
    rule_drops,
)

from workers.ruleset import compile_snapshot
from workers.ruleset import snapshot as s

pytestmark = pytest.mark.lab

A_DEVICE, A_PUBLIC = "10.100.1.41", "198.51.100.41"  # the flooded member
B_DEVICE, B_PUBLIC = "10.100.1.42", "198.51.100.42"
PROXY = "SYN proxy: forwarded TCP ports"
ECHO_SERVER = """
import select, socket, sys, time
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], 81)); srv.listen(4096); srv.setblocking(False)
conns, deadline = [srv], time.monotonic() + 30
while time.monotonic() < deadline:
    for s in select.select(conns, [], [], 0.2)[0]:
        if s is srv:
            c, _ = srv.accept(); conns.append(c)
        else:
            data = s.recv(100)
            if data:
                s.sendall(b"pong")
            conns.remove(s); s.close()
"""
ECHO_CLIENTS = """
import socket, sys, time
ok, when = 0, []
print("ready", flush=True); sys.stdin.readline()  # start with the flood
for _ in range(int(sys.argv[2])):
    try:
        c = socket.create_connection((sys.argv[1], 8081), timeout=3)
        c.sendall(b"ping")
        if c.recv(10) == b"pong":
            ok += 1; when.append(time.monotonic())
        c.close()
    except OSError:
        pass
    time.sleep(float(sys.argv[3]))
print(ok, flush=True)
print(*when, flush=True)
"""
BULK_SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 81)); s.listen(1); s.settimeout(15)
c, peer = s.accept(); c.settimeout(15)
got = 0
while got < 500_000:
    chunk = c.recv(65536)
    if not chunk:
        break
    got += len(chunk)
c.sendall(peer[0].encode().ljust(64) + b"z" * 2_000_000); c.close(); print(got)
"""
BULK_CLIENT = """
import socket, sys
c = socket.create_connection((sys.argv[1], 8081), timeout=10)
c.sendall(b"y" * 500_000)
data = b""
while True:
    chunk = c.recv(65536)
    if not chunk:
        break
    data += chunk
print(data[:64].decode().strip(), len(data) - 64)
"""


def compiled(host: str) -> str:
    def member(mid: int, device: str, public: str) -> s.Member:
        return s.Member(
            id=mid,
            public_ipv4=public,
            devices=(s.Device(id=mid * 10, ipv4=device),),
            forwards=(
                s.PortForward(mid, "tcp", s.PortRange(8080, 8080), mid * 10, s.PortRange(80, 80)),
                s.PortForward(mid + 100, "tcp", s.PortRange(8081, 8081), mid * 10,
                              s.PortRange(81, 81)),
            ),
        )  # fmt: skip

    snapshot = s.Snapshot(
        policy=s.Policy(management_networks=("10.255.255.0/28",), syn_proxy=True),
        host=s.Host(
            name=host,
            uplink_interfaces=("inet0",),
            member_interfaces=("dorm0",),
            management_interfaces=("mgmt0",),
            private_networks=("10.100.0.0/16",),
            public_networks=("198.51.100.0/24",),
        ),
        members=(member(1, A_DEVICE, A_PUBLIC), member(2, B_DEVICE, B_PUBLIC)),
    )
    return compile_snapshot(snapshot).nft


SYN_COUNTER = """table inet pl_syncount {
    chain input {
        type filter hook prerouting priority raw; policy accept;
        ip daddr 10.100.1.41 tcp dport 80 tcp flags & (syn | ack) == syn counter
    }
}
"""


def device_syns() -> int:
    text = in_ns("pl-dorm", "nft", "list", "table", "inet", "pl_syncount").stdout
    return int(text.split("counter packets", 1)[1].split()[0])


@pytest.fixture
def proxied(lab):
    for host in ("pl-nat1", "pl-nat2"):
        reset_host(host)
        assert in_ns(host, "nft", "-f", "-", input=compiled(host)).returncode == 0
        in_ns(host, "conntrack", "-F")
    assert lab_sh("device-add", A_DEVICE, B_DEVICE).returncode == 0
    assert in_ns("pl-dorm", "nft", "-f", "-", input=SYN_COUNTER).returncode == 0
    procs = [
        subprocess.Popen(["ip", "netns", "exec", "pl-dorm", "python3", "-c", SERVER, device,
                          "80", "60"]) for device in (A_DEVICE, B_DEVICE)
    ]  # fmt: skip
    time.sleep(0.5)
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=5)
        in_ns("pl-dorm", "nft", "delete", "table", "inet", "pl_syncount")
        lab_sh("device-del", A_DEVICE, B_DEVICE)
        for host in ("pl-nat1", "pl-nat2"):
            reset_host(host)
            in_ns(host, "conntrack", "-F")


def test_a_client_reaches_the_device_through_the_proxy_with_data_both_ways(proxied):
    server = subprocess.Popen(
        ["ip", "netns", "exec", "pl-dorm", "python3", "-c", BULK_SERVER, A_DEVICE],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(0.5)
    client = in_ns("pl-inet", "python3", "-c", BULK_CLIENT, A_PUBLIC, timeout=30)
    seen_by_device, received = client.stdout.split()
    assert seen_by_device == "203.0.113.10"  # the client's own address: no SNAT on the way in
    assert int(received) == 2_000_000
    assert int(server.communicate(timeout=20)[0]) == 500_000
    assert rule_drops("pl-nat1", "forward", PROXY) >= 2  # the SYN and the ACK went through it
    listing = in_ns("pl-nat1", "conntrack", "-L", "-p", "tcp", "--orig-port-dst", "8081").stdout
    assert f"dst={A_PUBLIC}" in listing
    assert f"src={A_DEVICE}" in listing  # the reply side: the device, DNAT applied


def test_a_spoofed_syn_flood_creates_no_entries_and_never_reaches_the_device(proxied):
    peak = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], conntrack_count("pl-nat1"))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    syns_before = device_syns()
    senders = flood_senders(A_PUBLIC, 8080)
    echo = subprocess.Popen(
        ["ip", "netns", "exec", "pl-dorm", "python3", "-c", ECHO_SERVER, B_DEVICE]
    )
    legit = subprocess.Popen(
        ["ip", "netns", "exec", "pl-inet", "python3", "-c", ECHO_CLIENTS, B_PUBLIC, "200",
         "0.008"],  # started with the flood, one every 8 ms: they meet it
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert legit.stdout is not None
    assert legit.stdout.readline().strip() == "ready"
    time.sleep(0.5)  # the echo server listens
    flood_start(senders, legit)
    flood = flood_wait(senders)
    sent = flood.sent
    out = legit.communicate(timeout=120)[0].splitlines()  # after "ready"
    ok = int(out[0])
    during = flood.during([float(t) for t in out[1].split()])
    stop.set()
    watcher.join()
    echo.kill()
    echo.wait(timeout=5)
    proxied_syns = rule_drops("pl-nat1", "forward", PROXY)
    sys.stdout.write(
        f"\nSYN flood through the SYN proxy: {sent} packets in 2 s, {proxied_syns} answered by "
        f"the proxy, peak conntrack {peak[0]}, legitimate {ok}/200, SYNs at the device "
        f"{device_syns() - syns_before}, {during} legitimate made while the flood ran\n"
    )
    assert during >= 20  # the legitimate connections met the flood, not only its aftermath
    assert ok >= 198  # >= 99 % of the other clients' connections
    assert proxied_syns >= sent * 0.5  # the proxy answered the flood (some are lost on the way)
    assert device_syns() - syns_before == 0  # not one spoofed SYN reached the device
    assert peak[0] <= 200 + 50  # the legitimate connections, a little else: no flood entries
