"""Issue 13, traffic per member, with real packets through rule sets the portal pushed itself:
what a device downloads and uploads through the uplink is counted once, whatever happens in
between: the same totals read twice, a full replacement of the rule set (the element counters
start over; the helper carries what they had counted), a failover to pl-nat2 and back."""

from __future__ import annotations

import subprocess

import pytest
from django.core.management import call_command
from django.db.models import Sum
from lab_support import fw, in_ns, lab_sh

from apps.firewall.models import FirewallHost
from apps.network.models import NetworkSettings
from apps.traffic.models import TrafficBucket, TrafficCounter

pytestmark = [pytest.mark.lab, pytest.mark.django_db]

SERVER = """
import socket, sys
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(family)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1)
s.settimeout(10)
conn, _ = s.accept()
conn.settimeout(10)
want, got = int(sys.argv[3]), 0
while got < want:
    chunk = conn.recv(65536)
    if not chunk:
        break
    got += len(chunk)
conn.sendall(b"x" * int(sys.argv[4]))
conn.close()
print(got)
"""
CLIENT = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10,
                             source_address=(sys.argv[5], 0))
s.sendall(b"y" * int(sys.argv[3]))
got = 0
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    got += len(chunk)
print(got)
"""
INET4, INET6 = "203.0.113.10", "2001:db8:ffff::10"


def transfer(source: str, target: str, port: int, up: int, down: int) -> None:
    """`up` bytes from the device to pl-inet, then `down` bytes back, over one TCP connection."""
    server = subprocess.Popen(
        ["ip", "netns", "exec", "pl-inet", "python3", "-c", SERVER, target, str(port), str(up),
         str(down)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        for _ in range(50):
            if f":{port}" in in_ns("pl-inet", "ss", "-ltn").stdout:
                break
        client = in_ns(
            "pl-dorm", "python3", "-c", CLIENT, target, str(port), str(up), str(down), source,
            timeout=20,
        )  # fmt: skip
        assert client.stdout.strip() == str(down), client.stderr[-500:]
        out, err = server.communicate(timeout=15)
        assert out.strip() == str(up), err[-500:]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=5)


def totals(member) -> tuple[int, int]:
    rows = list(TrafficBucket.objects.filter(member=member).values_list("bytes_in", "bytes_out"))
    return sum(r[0] for r in rows), sum(r[1] for r in rows)


def assert_counted(member, before: tuple[int, int], down: int, up: int) -> tuple[int, int]:
    """The new totals hold the payload once (plus TCP/IP headers and ACKs: under 10 %)."""
    call_command("traffic_collect")
    now = totals(member)
    got_in, got_out = now[0] - before[0], now[1] - before[1]
    assert down <= got_in < down * 1.1 + 20_000, (got_in, down)
    assert up <= got_out < up * 1.1 + 20_000, (got_out, up)
    return now


def test_traffic_is_counted_once_across_rereads_replacement_and_failover(device_in_lab):
    member, device = device_in_lab
    call_command("firewall_push", now=True)
    assert all(h.push_status == "applied" for h in FirewallHost.objects.all())
    zero = totals(member)
    assert zero == (0, 0)

    transfer(device.ipv4, INET4, 7101, 200_000, 1_000_000)
    counted = assert_counted(member, zero, 1_000_000, 200_000)
    call_command("traffic_collect")  # the same totals read again add nothing
    assert totals(member) == counted

    # Traffic right before a full replacement, not read yet: IPv6 (counted per member /64 on
    # pl-nat2, the IPv6 primary) and IPv4. A policy change is a structure change: every host
    # replaces its rule set as a whole, and its element counters start over.
    transfer(device.ipv6, INET6, 7102, 50_000, 300_000)
    transfer(device.ipv4, INET4, 7103, 20_000, 150_000)
    settings_row, _ = NetworkSettings.objects.get_or_create(id=1)
    settings_row.conntrack_quota_devices = 9_999
    settings_row.save()
    call_command("firewall_push", now=True)
    for host in ("pl-nat1", "pl-nat2"):
        assert fw(host, "version").data["state"]["modes"]["nft"] == "replace"
    transfer(device.ipv4, INET4, 7104, 100_000, 400_000)
    counted = assert_counted(
        member, counted, 300_000 + 150_000 + 400_000, 50_000 + 20_000 + 100_000
    )

    # pl-nat1 fails: pl-nat2 forwards IPv4 now and counts it; back again, nothing is doubled.
    try:
        assert lab_sh("host-down", "nat1").returncode == 0
        transfer(device.ipv4, INET4, 7105, 80_000, 600_000)
    finally:
        assert lab_sh("host-up", "nat1").returncode == 0
        assert lab_sh("failback").returncode == 0
    counted = assert_counted(member, counted, 600_000, 80_000)
    downloaded = dict(
        TrafficCounter.objects.filter(set_name__endswith="_in")
        .values_list("host__name")
        .annotate(Sum("octets"))
    )
    assert downloaded.get("pl-nat2", 0) >= 600_000 + 300_000  # the failover's and IPv6's
    assert downloaded.get("pl-nat1", 0) >= 1_000_000 + 150_000 + 400_000
    call_command("traffic_collect")
    assert totals(member) == counted


def test_what_a_device_sent_right_before_its_removal_reaches_its_member(hosts):
    """Issue 26: a device removed between two readings lost what its IPv4 elements counted
    since the last one (the increment deleted them with their counters). Now the agent carries
    them and the portal gives them to the key's last owner: the bytes of a transfer right
    before the removal appear in the member's traffic."""
    from apps.network.services import device_remove
    from tests.factories import device_add, member_active

    member = member_active()
    device = device_add(member, "laptop")
    added = lab_sh("device-add", device.ipv4, device.ipv6)
    assert added.returncode == 0, added.stderr
    try:
        call_command("firewall_push", now=True)
        # The lab's hosts keep their totals across tests (an earlier test's device may have had
        # this address): what they hold now is the baseline.
        call_command("traffic_collect")
        transfer(device.ipv4, INET4, 7111, 10_000, 30_000)
        counted = assert_counted(member, totals(member), 30_000, 10_000)  # read: its last owner

        transfer(device.ipv4, INET4, 7112, 120_000, 400_000)  # not read yet
        device_remove(device=device, actor=None)
        call_command("firewall_push", now=True)
        for host in ("pl-nat1", "pl-nat2"):  # the element increment, no full replacement
            assert fw(host, "version").data["state"]["modes"]["nft"] == "increment"
            assert device.ipv4 not in in_ns(host, "nft", "list", "set", "inet", "portal_fw",
                                            "acct4_out").stdout  # fmt: skip
        assert_counted(member, counted, 400_000, 120_000)
    finally:
        lab_sh("device-del", device.ipv4, device.ipv6)
