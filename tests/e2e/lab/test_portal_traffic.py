"""Real packets through rule sets the portal compiled from its database and pushed itself:
a member's device reaches the Internet side from the member's own public IPv4, also after
pl-nat1 fails and pl-nat2 takes over IPv4."""

from __future__ import annotations

import subprocess

import pytest
from django.core.management import call_command
from lab_support import in_ns, lab_sh

from apps.firewall.models import FirewallHost
from tests.factories import device_add, member_active

pytestmark = [pytest.mark.lab, pytest.mark.django_db]

INET = "203.0.113.10"
SERVER = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("203.0.113.10", int(sys.argv[1])))
s.listen(1)
s.settimeout(8)
conn, peer = s.accept()
conn.sendall(peer[0].encode())
conn.close()
"""
CLIENT = """
import socket, sys
s = socket.create_connection(("203.0.113.10", int(sys.argv[1])), timeout=5,
                             source_address=(sys.argv[2], 0))
print(s.recv(100).decode())
"""


def seen_source(device_ip: str, port: int) -> str:
    """Connect from the device's address in pl-dorm to a server in pl-inet: whom it saw."""
    server = subprocess.Popen(
        ["ip", "netns", "exec", "pl-inet", "python3", "-c", SERVER, str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(50):  # until the server listens (bounded)
            if str(port) in in_ns("pl-inet", "ss", "-ltn").stdout:
                break
        client = in_ns("pl-dorm", "python3", "-c", CLIENT, str(port), device_ip, timeout=10)
        return client.stdout.strip() or f"client failed: {client.stderr.strip()[-300:]}"
    finally:
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=5)


def test_device_leaves_from_its_members_public_address_also_after_failover(device_in_lab):
    member, device = device_in_lab
    public = member.public_ipv4.address
    call_command("firewall_push", now=True)
    assert all(h.push_status == "applied" for h in FirewallHost.objects.all())
    assert seen_source(device.ipv4, 7001) == public
    try:
        assert lab_sh("host-down", "nat1").returncode == 0
        assert seen_source(device.ipv4, 7002) == public  # pl-nat2 runs the same rule set
    finally:
        assert lab_sh("host-up", "nat1").returncode == 0
        assert lab_sh("failback").returncode == 0
    assert seen_source(device.ipv4, 7003) == public


def test_a_suspended_members_device_no_longer_gets_out(device_in_lab):
    from apps.members.services import member_suspend

    member, device = device_in_lab
    call_command("firewall_push", now=True)
    assert seen_source(device.ipv4, 7004) == member.public_ipv4.address
    member_suspend(member=member, reason="unpaid", actor=None)
    call_command("firewall_push", now=True)
    assert seen_source(device.ipv4, 7005).startswith("client failed")


def test_lab_register_puts_the_members_devices_into_pl_dorm(hosts):
    device = device_add(member_active(), "desktop")
    try:
        call_command("lab_register")
        listing = in_ns("pl-dorm", "ip", "-br", "addr").stdout
        assert device.ipv4 in listing
        assert device.ipv6 in listing
    finally:
        lab_sh("device-del", device.ipv4, device.ipv6)


def test_the_next_push_sends_only_the_increment(device_in_lab):
    from lab_support import fw

    from apps.firewall.models import RuleSetVersion
    from tests.factories import forward_add

    member, device = device_in_lab
    call_command("firewall_push", now=True)  # the hosts get the whole rule set
    forward_add(member, device, ports="8443")
    call_command("firewall_push", now=True)  # now they hold the previous version
    for host in FirewallHost.objects.all():
        latest = RuleSetVersion.objects.filter(host=host).first()
        answer = fw(host.name, "version").data
        assert answer["version"] == latest.content_hash
        assert answer["state"]["modes"]["nft"] == "increment", answer
        listing = in_ns(host.name, "nft", "list", "map", "ip", "portal_nat", "fwd_tcp").stdout
        assert "8443" in listing
