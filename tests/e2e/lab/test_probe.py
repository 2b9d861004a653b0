"""Issue 13, "test my forward": the probe host outside the network (pl-probe, reached over SSH
with a forced command like the firewalls) connects to the member's public address and port
through the real firewalls, and the member reads reachable / refused / no answer in place.
Rate-limited per member, answers reused for a minute, audited."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from lab_support import lab_sh

from apps.audit.models import AuditEntry
from apps.firewall.models import FirewallHost
from apps.network.models import NetworkSettings
from tests.factories import device_add, forward_add, member_active, opening_add

pytestmark = [pytest.mark.lab, pytest.mark.django_db]

SERVER = """
import socket, sys, time
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16); s.settimeout(0.2)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        c, _ = s.accept(); c.close()
    except TimeoutError:
        pass
"""


@pytest.fixture
def lab_member(hosts):
    NetworkSettings.objects.update_or_create(
        id=1, defaults={"probe_address": "10.255.255.13", "forward_tests_per_hour": 4}
    )
    cache.clear()
    member = member_active()
    device = device_add(member, "server")
    added = lab_sh("device-add", device.ipv4, device.ipv6)
    assert added.returncode == 0, added.stderr
    try:
        yield member, device
    finally:
        lab_sh("device-del", device.ipv4, device.ipv6)


def serve(address: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        ["ip", "netns", "exec", "pl-dorm", sys.executable, "-c", SERVER, address, str(port)]
    )
    time.sleep(0.3)
    return proc


def probe_of(client: Client, kind: str, pk: int) -> str:
    response = client.post(reverse(f"network:{kind}_probe", args=[pk]), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    return response.content.decode()


def test_a_member_tests_forwards_and_an_opening_from_outside(lab_member):
    member, device = lab_member
    listening = forward_add(member, device, ports="8080")
    closed = forward_add(member, device, ports="8081")
    opening = opening_add(device, ports="8443")
    call_command("firewall_push", now=True)
    assert all(h.push_status == "applied" for h in FirewallHost.objects.all())
    servers = [serve(device.ipv4, 8080), serve(device.ipv6, 8443)]
    client = Client()
    client.force_login(member.user)
    try:
        reachable = probe_of(client, "forward", listening.pk)
        assert 'data-result="reachable"' in reachable
        assert "TCP 8080: reachable" in reachable
        refused = probe_of(client, "forward", closed.pk)
        assert 'data-result="refused"' in refused  # the device answered: nothing listens
        assert 'data-result="reachable"' in probe_of(client, "opening", opening.pk)
        # The device goes away: the probe gets no answer at all.
        lab_sh("device-del", device.ipv4)
        cache.clear()  # (answers are reused for a minute)
        assert 'data-result="no-answer"' in probe_of(client, "forward", listening.pk)
    finally:
        for proc in servers:
            proc.kill()
            proc.wait(timeout=5)
    assert AuditEntry.objects.filter(action="portforward.probe").count() == 3
    assert AuditEntry.objects.filter(action="ipv6opening.probe").count() == 1


def test_tests_are_rate_limited_per_member_and_answers_reused_for_a_minute(lab_member):
    member, device = lab_member
    forwards = [forward_add(member, device, ports=str(9000 + n)) for n in range(5)]
    call_command("firewall_push", now=True)
    client = Client()
    client.force_login(member.user)
    first = probe_of(client, "forward", forwards[0].pk)
    assert "(a minute ago)" in probe_of(client, "forward", forwards[0].pk)  # reused, not counted
    assert "data-result" in first
    for forward in forwards[1:4]:
        assert "data-result" in probe_of(client, "forward", forward.pk)
    limited = probe_of(client, "forward", forwards[4].pk)
    assert "You may test 4 times an hour" in limited
    assert AuditEntry.objects.filter(action="portforward.probe").count() == 4
    # Another member's forward is not theirs to test.
    other = forward_add(member_active(), ports="9100")
    assert client.post(reverse("network:forward_probe", args=[other.pk])).status_code == 404
