"""Forwards added by incremental pushes carry real traffic, like those of a full push."""

from __future__ import annotations

import subprocess

import pytest
from django.core.management import call_command
from lab_support import fw, in_ns, lab_sh

from tests.factories import device_add, forward_add, member_active

pytestmark = [pytest.mark.lab, pytest.mark.django_db]

SERVER = """
import socket, sys, select, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 80))
s.listen(64)
deadline = time.monotonic() + 40
while time.monotonic() < deadline:
    if select.select([s], [], [], 0.5)[0]:
        conn, _ = s.accept()
        conn.sendall(b"ok")
        conn.close()
"""
CLIENT = """
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1)
    print(s.recv(10).decode())
except OSError as exc:
    print("no", exc)
"""


def answers(public: str, port: int) -> str:
    return in_ns("pl-inet", "python3", "-c", CLIENT, public, str(port), timeout=5).stdout.strip()


def test_forwards_added_incrementally_answer(hosts):
    member = member_active()
    device = device_add(member, "box")
    assert lab_sh("device-add", device.ipv4, device.ipv6).returncode == 0
    server = subprocess.Popen(
        ["ip", "netns", "exec", "pl-dorm", "python3", "-c", SERVER, device.ipv4]
    )
    public = member.public_ipv4.address
    try:
        forward_add(member, device, ports="9000", target="80")
        call_command("firewall_push", now=True)
        assert answers(public, 9000) == "ok"
        for port in (9001, 9002, 9003):
            forward_add(member, device, ports=str(port), target="80")
            call_command("firewall_push", now=True)
            assert fw("pl-nat1", "version").data["state"]["modes"]["nft"] == "increment"
            got = {p: answers(public, p) for p in range(9000, port + 1)}
            assert set(got.values()) == {"ok"}, (
                got,
                in_ns("pl-nat1", "nft", "list", "ruleset").stdout[-3000:],
            )
    finally:
        server.kill()
        server.wait(timeout=5)
        lab_sh("device-del", device.ipv4, device.ipv6)
