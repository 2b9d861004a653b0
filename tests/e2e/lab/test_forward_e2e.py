"""Issue 6's proof: a resident creates a forward through the API; seconds later it answers
from pl-inet at the member's public address and port, and the API shows it live on both
firewalls. Edits made while a rollout runs arrive with a follow-up run; a forward keeps
working when pl-nat1 fails and pl-nat2 takes over IPv4."""

from __future__ import annotations

import subprocess
import time

import pytest
from lab_support import in_ns, lab_sh
from rest_framework.test import APIClient

from apps.firewall.models import FirewallHost
from apps.firewall.pipeline import site_lock
from tests.celery_proc import wait_until
from tests.factories import device_add, member_active

pytestmark = [pytest.mark.lab, pytest.mark.django_db(transaction=True)]

SERVER = """
import socket, sys, select, time
socks = []
for port in sys.argv[2:]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], int(port)))
    s.listen(16)
    socks.append(s)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    ready, _, _ = select.select(socks, [], [], 0.5)
    for s in ready:
        conn, _ = s.accept()
        conn.sendall(b"hello from port %d" % s.getsockname()[1])
        conn.close()
"""
CLIENT = """
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=0.5)
    print(s.recv(100).decode())
except OSError as exc:
    print("refused:", exc)
"""


@pytest.fixture
def resident_device(worker):
    member = member_active()
    device = device_add(member, "console")
    assert lab_sh("device-add", device.ipv4, device.ipv6).returncode == 0
    server = subprocess.Popen(
        ["ip", "netns", "exec", "pl-dorm", "python3", "-c", SERVER, device.ipv4, "80", "81"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield member, device
    finally:
        server.kill()
        server.wait(timeout=5)
        lab_sh("device-del", device.ipv4, device.ipv6)


def from_inet(address: str, port: int) -> str:
    return in_ns("pl-inet", "python3", "-c", CLIENT, address, str(port), timeout=5).stdout.strip()


def create_forward(client: APIClient, device, public: str, target: str) -> int:
    response = client.post(
        "/api/port-forwards/",
        {"device": device.pk, "protocol": "tcp", "public_ports": public, "target_ports": target},
        format="json",
    )
    assert response.status_code == 201, response.content
    return response.json()["id"]


def test_forward_created_through_the_api_answers_from_the_internet_side(resident_device):
    member, device = resident_device
    public = member.public_ipv4.address
    client = APIClient()
    client.force_authenticate(member.user)
    assert from_inet(public, 8080).startswith("refused")  # nothing forwarded yet
    started = time.monotonic()
    pk = create_forward(client, device, "8080", "80")
    answer = wait_until(lambda: from_inet(public, 8080) == "hello from port 80", 15, 0.05)
    elapsed = time.monotonic() - started
    assert answer, from_inet(public, 8080)
    print(f"forward answered from pl-inet {elapsed:.2f} s after the API call")  # noqa: T201

    def live() -> dict | None:
        state = client.get(f"/api/port-forwards/{pk}/").json()["live"]
        return state if state["state"] == "live" else None

    state = wait_until(live, 10, 0.2)
    assert state, client.get(f"/api/port-forwards/{pk}/").json()["live"]
    assert [(h["host"], h["state"]) for h in state["hosts"]] == [
        ("pl-nat1", "live"),
        ("pl-nat2", "live"),
    ]
    assert from_inet(public, 8081).startswith("refused")  # an unforwarded port stays closed

    # Disabled through the API: closed again.
    client.patch(f"/api/port-forwards/{pk}/", {"enabled": False}, format="json")
    assert wait_until(lambda: from_inet(public, 8080).startswith("refused"), 15, 0.1)


def test_edits_during_a_rollout_arrive_with_a_follow_up_run(resident_device):
    member, device = resident_device
    public = member.public_ipv4.address
    client = APIClient()
    client.force_authenticate(member.user)
    site = FirewallHost.objects.get(name="pl-nat1").site_id
    with site_lock(site, wait=15):  # a rollout of the lab's site is running (after any under way)
        create_forward(client, device, "9080", "80")
        time.sleep(1.5)  # the worker tries, finds the lock held, and retries
        assert from_inet(public, 9080).startswith("refused")
    assert wait_until(lambda: from_inet(public, 9080) == "hello from port 80", 15, 0.1)


def test_forward_keeps_working_when_pl_nat1_fails(resident_device):
    member, device = resident_device
    public = member.public_ipv4.address
    client = APIClient()
    client.force_authenticate(member.user)
    create_forward(client, device, "7080", "81")
    assert wait_until(lambda: from_inet(public, 7080) == "hello from port 81", 15, 0.1)
    try:
        assert lab_sh("host-down", "nat1").returncode == 0
        assert wait_until(lambda: from_inet(public, 7080) == "hello from port 81", 5, 0.1)
    finally:
        assert lab_sh("host-up", "nat1").returncode == 0
        assert lab_sh("failback").returncode == 0
