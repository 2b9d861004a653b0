"""Issue 12's proof in the lab: Kea on pl-nat1 and pl-nat2 serves what the portal's database says.

A device registered through the API leases its reserved address from a real DHCP client
(`lab.sh client MAC`, dhclient in its own namespace) and its forward answers from pl-inet; an
unknown MAC gets a registration address and reaches the portal only; moves, removals and
suspensions reach the device at its next renew; a Kea configuration a host refuses stops the
rollout at that host; DHCP keeps serving while the portal's services are down; a lease survives
pl-nat1 failing.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from lab_support import LAB_VAR, in_ns, lab_sh, run
from rest_framework.test import APIClient

from apps.dhcp.models import DhcpSettings, RegistrationRange
from apps.firewall.models import FirewallHost, Site
from tests.celery_proc import wait_until
from tests.factories import member_active

pytestmark = [pytest.mark.lab, pytest.mark.django_db(transaction=True)]

REGISTRATION = "10.100.250.0/24"
PORTAL = "203.0.113.80"
CAPTIVE_URL = "https://portal.dorm.example.org/api/captive-portal/"

SERVER = """
import socket, sys, select, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(16)
deadline = time.monotonic() + 90
while time.monotonic() < deadline:
    ready, _, _ = select.select([s], [], [], 0.5)
    if ready:
        conn, _ = s.accept()
        conn.sendall(b"hello from " + sys.argv[3].encode())
        conn.close()
"""
CLIENT = """
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1)
    print(s.recv(100).decode() or "connected")
except OSError as exc:
    print("refused:", exc)
"""

UDP = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1)
s.connect((sys.argv[1], int(sys.argv[2])))
s.send(b"x")
try:
    s.recv(100)
    print("answered")
except TimeoutError:
    print("timed out")
except OSError as exc:
    print("refused:", exc.errno)
"""


def client(mac: str, verb: str = "client") -> str:
    """`lab.sh client MAC` (or client-renew): the leased IPv4, or "no lease"."""
    result = lab_sh(verb, mac, timeout=40)
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr


def connect(ns: str, address: str, port: int) -> str:
    return in_ns(ns, "python3", "-c", CLIENT, address, str(port), timeout=10).stdout.strip()


def ns_of(mac: str) -> str:
    return "pl-c-" + mac.replace(":", "")


@pytest.fixture
def dhcp(hosts, worker):
    """Both lab hosts serve DHCP for the site, with a registration range for the building."""
    lab = json.loads((LAB_VAR / "lab.json").read_text())
    for entry in lab["hosts"]:
        FirewallHost.objects.filter(name=entry["name"]).update(
            serves_dhcp=True,
            kea_control_socket=entry["dhcp"]["control_socket"],
            kea_lease_file=entry["dhcp"]["lease_file"],
            ra_pid_file=entry["dhcp"]["ra_pid_file"],
        )
    settings_row = DhcpSettings.load()
    settings_row.portal_addresses = PORTAL
    settings_row.lease_seconds = 600
    settings_row.registration_lease_seconds = 60
    settings_row.save()
    settled()
    macs: list[str] = []
    yield macs
    settled()  # no push of this test may be reverted by its timer during the next one
    for mac in macs:
        lab_sh("client-down", mac)


def settled(timeout: float = 30) -> None:
    """Wait until neither lab host holds an unconfirmed apply (its rollback timer armed) and
    the portal has recorded what each host confirmed (the worker writes that just after the
    confirm: a drift check in between would compare with the version before)."""
    import json

    names = ("pl-nat1", "pl-nat2")

    def recorded() -> bool:
        if any((LAB_VAR / h / "fw" / "pending.json").exists() for h in names):
            return False
        for host in FirewallHost.objects.filter(name__in=names):
            try:
                state = json.loads((LAB_VAR / host.name / "fw" / "state.json").read_text())
            except (OSError, ValueError):
                continue  # nothing pushed to it yet
            if state.get("version") != host.applied_checksum:
                return False
        return True

    wait_until(recorded, timeout, 0.1)


def registered(member_building, *, client_api: APIClient, name: str, mac: str) -> dict:
    response = client_api.post("/api/devices/", {"name": name, "mac": mac}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def range_for(building, network: str = REGISTRATION) -> None:
    RegistrationRange.objects.get_or_create(building=building, defaults={"network": network})


def wait_for_lease(mac: str, expected: str, verb: str = "client", timeout: float = 30) -> str:
    """The client asks until it holds `expected` (the push may still be on its way)."""
    seen = []

    def ask():
        got = client(mac, verb)
        seen.append(got)
        return got == expected

    ask_verb = verb
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ask():
            return expected
        ask_verb = "client-renew"
        verb = ask_verb
        time.sleep(0.3)
    hosts = [(h.name, h.push_status, h.error_reason[-300:]) for h in FirewallHost.objects.all()]
    logs = {
        host: (LAB_VAR / host / "kea" / "kea.log").read_text()[-1500:]
        for host in ("pl-nat1", "pl-nat2")
        if (LAB_VAR / host / "kea" / "kea.log").exists()
    }
    raise AssertionError(f"{mac} never leased {expected}: {seen[-5:]}; hosts {hosts}; Kea {logs}")


def test_a_device_registered_through_the_api_leases_its_reserved_address_and_its_forward_answers(
    dhcp,
):
    member = member_active()
    range_for(member.room.building)
    api = APIClient()
    api.force_authenticate(member.user)
    mac = "02:00:00:12:00:01"
    dhcp.append(mac)
    started = time.monotonic()
    device = registered(member.room.building, client_api=api, name="console", mac=mac)
    address = device["ipv4"]
    assert wait_for_lease(mac, address) == address
    print(f"lease of the reserved address {time.monotonic() - started:.2f} s after the API call")  # noqa: T201

    server = subprocess.Popen(
        ["ip", "netns", "exec", ns_of(mac), "python3", "-c", SERVER, address, "80", "console"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        response = api.post(
            "/api/port-forwards/",
            {
                "device": device["id"],
                "protocol": "tcp",
                "public_ports": "8080",
                "target_ports": "80",
            },
            format="json",
        )
        assert response.status_code == 201, response.content
        public = member.public_ipv4.address
        assert wait_until(
            lambda: connect("pl-inet", public, 8080) == "hello from console", 20, 0.2
        ), connect("pl-inet", public, 8080)
    finally:
        server.kill()
        server.wait(timeout=5)


FETCH = """
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
        print(r.geturl()); print(r.read().decode())
except OSError as exc:
    print("failed:", exc)
"""


def test_an_unknown_mac_is_walled_in_then_registered_and_renewed_gets_its_address(
    dhcp, live_server
):
    from apps.dhcp.walled import registration_networks_forget

    member = member_active()
    range_for(member.room.building)
    registration_networks_forget()
    api = APIClient()
    api.force_authenticate(member.user)
    from apps.network.hooks import network_changed

    DhcpSettings.objects.filter(id=1).update(captive_portal_url=CAPTIVE_URL)
    network_changed(cause="test: registration range", actor=None)  # Kea pools + walled garden
    port = live_server.url.rsplit(":", 1)[1]
    assert lab_sh("portal-proxy", port).returncode == 0
    mac = "02:00:00:12:00:02"
    dhcp.append(mac)
    inet = subprocess.Popen(
        ["ip", "netns", "exec", "pl-inet", "python3", "-c", SERVER, "203.0.113.10", "8080", "inet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        seen = []
        lease_file = LAB_VAR / "clients" / mac.replace(":", "") / "dhclient.leases"

        def walled() -> str | None:
            """A walled address whose lease carries option 114: after an earlier test the
            registration range may already be in Kea, so the first lease can come from the
            configuration before this test's (with the captive URL) is loaded; renew then."""
            verb = "client-renew" if seen else "client"
            seen.append(client(mac, verb))
            if not seen[-1].startswith("10.100.250."):
                return None
            leases = lease_file.read_text() if lease_file.exists() else ""
            return seen[-1] if "option captive-portal" in leases.rsplit("lease {", 1)[-1] else None

        address = wait_until(walled, 30, 0.3)
        assert address, seen[-5:]
        ns = ns_of(mac)
        # What the lease beat does every PORTAL_DHCP_LEASE_INTERVAL seconds (no beat runs here;
        # the page itself never reads the hosts).
        from apps.dhcp.services import leases_collect

        leases_collect()
        # The next round asks each host only for what its Kea wrote since (issue 26): nothing
        # is read from Kea, and the walled lease stays in the history.
        again = leases_collect()
        assert again, "no host serves DHCP"
        assert all(o.ok and not o.full for o in again), again
        # The portal, reached through the firewall, says what this is and knows the MAC.
        page = in_ns(ns, "python3", "-c", FETCH, f"http://{PORTAL}/devices/", timeout=20).stdout
        assert page.startswith(f"http://{PORTAL}/unregistered/"), page[:300]
        assert "This device is not registered" in page
        assert mac in page
        assert connect(ns, "203.0.113.10", 8080).startswith("refused")  # nothing else
        # Captive-portal detection: option 114 in the lease (RFC 8910), the API says captive
        # (RFC 8908), plain HTTP to any address is redirected, HTTPS is refused at once.
        leases = lease_file.read_text()
        assert f'option captive-portal "{CAPTIVE_URL}"' in leases, leases[-600:]
        captive = in_ns(ns, "curl", "-s", "-m", "5", f"http://{PORTAL}/api/captive-portal/").stdout
        assert json.loads(captive) == {
            "captive": True,
            "user-portal-url": "https://portal.dorm.example.org/unregistered/",
        }
        head = in_ns(ns, "curl", "-sI", "-m", "5", "http://203.0.113.10/").stdout
        assert head.startswith("HTTP/1.1 302"), head
        assert f"Location: http://{PORTAL}/unregistered/" in head, head
        started = time.monotonic()
        https = in_ns(ns, "curl", "-s", "-m", "5", "https://203.0.113.10/")
        took = time.monotonic() - started
        assert https.returncode == 7, (https.returncode, https.stderr)  # refused, not timed out
        assert took < 1.0, took
        # Anything else (here UDP) meets ICMP admin-prohibited at once: "no route to host".
        assert in_ns(ns, "python3", "-c", UDP, "203.0.113.10", "9").stdout.strip() == (
            f"refused: {errno.EHOSTUNREACH}"
        )
        counted = in_ns("pl-nat1", "nft", "list", "chain", "inet", "portal_fw", "walled").stdout
        assert "walled garden: unregistered device" in counted
        assert "packets 0 " not in counted.split("counter", 1)[1][:40], counted  # drops counted

        device = registered(member.room.building, client_api=api, name="laptop", mac=mac)
        assert wait_for_lease(mac, device["ipv4"], "client-renew") == device["ipv4"]
        assert wait_until(lambda: connect(ns, "203.0.113.10", 8080) == "hello from inet", 10, 0.2)
        captive = in_ns(ns, "curl", "-s", "-m", "5", f"http://{PORTAL}/api/captive-portal/").stdout
        assert json.loads(captive) == {"captive": False}
    finally:
        inet.kill()
        inet.wait(timeout=5)


def test_moved_removed_and_suspended_reach_the_device_at_its_next_renew(dhcp):
    from apps.members import services as member_services
    from apps.network.services import device_remove
    from tests.factories import RoomFactory

    member = member_active()
    range_for(member.room.building)
    api = APIClient()
    api.force_authenticate(member.user)
    mac = "02:00:00:12:00:03"
    dhcp.append(mac)
    device = registered(member.room.building, client_api=api, name="pc", mac=mac)
    assert wait_for_lease(mac, device["ipv4"]) == device["ipv4"]

    # Moved to another building: a new address from its subnet, at the next renew.
    other = RoomFactory()
    member_services.member_move(member=member, room=other, actor=None)
    from apps.network.models import Device

    moved = Device.objects.get(pk=device["id"]).ipv4
    assert moved != device["ipv4"]
    assert wait_for_lease(mac, moved, "client-renew") == moved

    # Suspended: no reservation any more, so the walled garden (no Internet).
    member.refresh_from_db()
    member_services.member_suspend(member=member, reason="test", actor=None)
    range_for(other.building, "10.100.251.0/24")
    from apps.network.hooks import network_changed

    network_changed(cause="test: range of the new building", actor=None)

    def walled() -> str | None:
        got = client(mac, "client-renew")
        return got if got.startswith(("10.100.250.", "10.100.251.")) else None

    assert wait_until(walled, 30, 0.3), client(mac, "client-renew")

    # Unsuspended, then the device removed: back to the walled garden.
    member.refresh_from_db()
    member_services.member_check_in(member=member, actor=None)
    assert wait_for_lease(mac, moved, "client-renew") == moved
    device_remove(device=Device.objects.get(pk=device["id"]), actor=None)
    assert wait_until(walled, 30, 0.3), client(mac, "client-renew")


def test_a_kea_configuration_the_host_refuses_stops_the_rollout_at_that_host(dhcp):
    member = member_active()
    api = APIClient()
    api.force_authenticate(member.user)
    mac = "02:00:00:12:00:04"
    dhcp.append(mac)
    first = registered(member.room.building, client_api=api, name="one", mac=mac)
    assert wait_for_lease(mac, first["ipv4"]) == first["ipv4"]
    nat2_conf = LAB_VAR / "pl-nat2" / "kea" / "kea-dhcp4.conf"
    assert wait_until(lambda: mac in nat2_conf.read_text(), 20, 0.1)  # the rollout went on
    settled()
    nat2_before = nat2_conf.read_text()

    # A typo in pl-nat1's DHCP interfaces: its real `kea-dhcp4 -t` refuses the configuration.
    FirewallHost.objects.filter(name="pl-nat1").update(dhcp_interfaces="dorm0,dorm9")
    registered(member.room.building, client_api=api, name="two", mac="02:00:00:12:00:05")

    def refused() -> FirewallHost | None:
        host = FirewallHost.objects.get(name="pl-nat1")
        return host if host.push_status == "error" else None

    host = wait_until(refused, 30, 0.2)
    assert host, FirewallHost.objects.get(name="pl-nat1").error_reason
    assert "kea-dhcp4" in host.error_reason, host.error_reason
    assert "dorm9" in host.error_reason, host.error_reason
    # The site is marked once its run ends (the hosts after the refusal get their versions
    # compiled first, for a later push).
    assert wait_until(lambda: Site.objects.get(pk=host.site_id).status == "failed", 20, 0.1)
    # pl-nat2 never saw it: its configuration is what it was, and DHCP still works everywhere.
    nat2_log = (LAB_VAR / "pl-nat2" / "fw" / "log.jsonl").read_text()[-3000:]
    assert (LAB_VAR / "pl-nat2" / "kea" / "kea-dhcp4.conf").read_text() == nat2_before, nat2_log
    assert "02:00:00:12:00:05" not in (LAB_VAR / "pl-nat1" / "kea" / "kea-dhcp4.conf").read_text()
    assert client(mac, "client-renew") == first["ipv4"]


def test_a_lease_survives_pl_nat1_failing(dhcp):
    """Reservation-only design: pl-nat2 serves the same reservation, so the client keeps its
    address when it asks again after pl-nat1 went down, and its traffic flows through pl-nat2."""
    member = member_active()
    api = APIClient()
    api.force_authenticate(member.user)
    mac = "02:00:00:12:00:06"
    dhcp.append(mac)
    device = registered(member.room.building, client_api=api, name="pc", mac=mac)
    assert wait_for_lease(mac, device["ipv4"]) == device["ipv4"]
    ns = ns_of(mac)
    inet = subprocess.Popen(
        ["ip", "netns", "exec", "pl-inet", "python3", "-c", SERVER, "203.0.113.10", "8080", "inet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: connect(ns, "203.0.113.10", 8080) == "hello from inet", 10, 0.2)
        assert lab_sh("host-down", "nat1").returncode == 0
        assert client(mac, "client-renew") == device["ipv4"]  # answered by pl-nat2
        leases = json.loads(lab_sh("ssh", "nat2", "dhcp-leases").stdout)["leases"]
        assert [device["ipv4"], mac] in [row[:2] for row in leases]
        assert wait_until(lambda: connect(ns, "203.0.113.10", 8080) == "hello from inet", 10, 0.2)
    finally:
        inet.kill()
        inet.wait(timeout=5)
        lab_sh("host-up", "nat1")
        lab_sh("failback")


def test_dhcp_keeps_serving_while_the_portals_services_are_down(dhcp):
    """The configuration lives on the hosts: with the portal's worker, PostgreSQL and Redis
    stopped, a new client still leases its reserved address and a known one renews."""
    from django.db import connections

    member = member_active()
    api = APIClient()
    api.force_authenticate(member.user)
    known, fresh = "02:00:00:12:00:07", "02:00:00:12:00:08"
    dhcp.extend([known, fresh])
    first = registered(member.room.building, client_api=api, name="one", mac=known)
    second = registered(member.room.building, client_api=api, name="two", mac=fresh)
    assert wait_for_lease(known, first["ipv4"]) == first["ipv4"]
    wait_until(lambda: fresh in (LAB_VAR / "pl-nat2" / "kea" / "kea-dhcp4.conf").read_text(), 20)
    connections.close_all()
    services = str(LAB_VAR.parent.parent / "deploy" / "dev" / "services.sh")
    stopped = subprocess.run(["bash", services, "stop"], capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    try:
        status = subprocess.run(["bash", services, "status"], capture_output=True, text=True)
        assert "redis: stopped" in status.stdout
        assert "no server running" in status.stdout + status.stderr
        assert client(known, "client-renew") == first["ipv4"]
        assert client(fresh) == second["ipv4"]
    finally:
        started = subprocess.run(
            ["bash", services, "start"], capture_output=True, text=True, timeout=120
        )
        assert started.returncode == 0, started.stderr
        connections.close_all()


SERVER6 = """
import socket, sys, select, time
s = socket.socket(socket.AF_INET6)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(16)
deadline = time.monotonic() + 90
while time.monotonic() < deadline:
    if select.select([s], [], [], 0.5)[0]:
        conn, _ = s.accept()
        conn.sendall(b"hello over IPv6")
        conn.close()
"""


def global_ipv6(ns: str) -> list[str]:
    out = in_ns(ns, "ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "global").stdout
    return [line.split()[3].split("/")[0] for line in out.splitlines()]


def test_slaac_gives_the_device_its_address_in_its_rooms_64_and_an_ipv6_opening_works(dhcp):
    """The IPv6 gateway host advertises each device's room /64 to that device alone; the
    device's EUI-64 address is the one the portal computed, so its opening answers."""
    member = member_active()
    api = APIClient()
    api.force_authenticate(member.user)
    mac = "02:00:00:12:00:09"
    dhcp.append(mac)
    device = registered(member.room.building, client_api=api, name="server", mac=mac)
    assert device["ipv6"], device
    assert wait_for_lease(mac, device["ipv4"]) == device["ipv4"]
    ns = ns_of(mac)
    assert wait_until(lambda: device["ipv6"] in global_ipv6(ns), 20, 0.2), global_ipv6(ns)
    assert len(global_ipv6(ns)) == 1  # its own room's prefix only, not every room's
    route = in_ns(ns, "ip", "-6", "route", "show", "default").stdout
    assert "via fe80::1" in route, route
    server = subprocess.Popen(
        ["ip", "netns", "exec", ns, "python3", "-c", SERVER6, device["ipv6"], "8443"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        response = api.post(
            "/api/ipv6-openings/",
            {"device": device["id"], "protocol": "tcp", "ports": "8443"},
            format="json",
        )
        assert response.status_code == 201, response.content
        assert wait_until(
            lambda: connect("pl-inet", device["ipv6"], 8443) == "hello over IPv6", 20, 0.2
        ), connect("pl-inet", device["ipv6"], 8443)
    finally:
        server.kill()
        server.wait(timeout=5)


def test_a_hand_edit_of_keas_configuration_is_drift_and_is_repaired(dhcp):
    from apps.health.services import host_health_collect
    from workers.health import firewall_health_collect

    member = member_active()
    api = APIClient()
    api.force_authenticate(member.user)
    mac = "02:00:00:12:00:0a"
    dhcp.append(mac)
    device = registered(member.room.building, client_api=api, name="pc", mac=mac)
    conf = LAB_VAR / "pl-nat1" / "kea" / "kea-dhcp4.conf"
    assert wait_until(lambda: mac in conf.read_text(), 20, 0.1)
    settled()
    pushed = conf.read_text()
    conf.write_text(pushed.replace(device["ipv4"], "10.100.99.99"))  # someone "fixes" it by hand

    host = FirewallHost.objects.get(name="pl-nat1")
    host.digest_checked_at = None
    host.save(update_fields=["digest_checked_at"])
    host_health_collect(host=host)
    host.refresh_from_db()
    assert host.drift == ["file:kea-dhcp4"]

    firewall_health_collect()  # the beat repairs it: the pushed text is back, and Kea runs it
    assert conf.read_text() == pushed
    host.refresh_from_db()
    assert host.drift == []
    assert client(mac) == device["ipv4"]


# ---- Kea on its own path (issue 26): a forward never waits for Kea's reload ----------------

SLOW_KEA = 8.0  # seconds each host's Kea part takes on top of its reload, in the tests below


def kea_path(host: str) -> dict:
    """What the host's Kea path did last (portal_fw/deferred.py)."""
    status = LAB_VAR / host / "fw" / "deferred-kea-dhcp4.status"
    request = LAB_VAR / host / "fw" / "deferred-kea-dhcp4.request"
    try:
        done = json.loads(status.read_text())
    except (OSError, ValueError):
        done = {}
    try:
        done["requested"] = json.loads(request.read_text())["seq"]
    except (OSError, ValueError, KeyError):
        done["requested"] = 0
    return done


def kea_served(host: str) -> dict | None:
    now = kea_path(host)
    served = now.get("state") not in (None, "loading") and now.get("seq", 0) >= now["requested"]
    return now if served else None


def kea_reserves(host: str, mac: str) -> bool:
    """The host's running Kea (config-get on its control socket) holds a reservation for mac."""
    sock = LAB_VAR / host / "kea" / "kea4.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(20)
        s.connect(str(sock))
        s.sendall(b'{"command": "config-get"}')
        data = b""
        while chunk := s.recv(1 << 16):
            data += chunk
    subnets = json.loads(data)["arguments"]["Dhcp4"]["subnet4"]
    return any(r.get("hw-address") == mac for s in subnets for r in s.get("reservations", []))


@pytest.fixture
def slow_kea():
    """`slow_kea()`: from then on both hosts' Kea part takes SLOW_KEA seconds longer (their
    declared reload command, wrapped): a host whose Kea part takes long, as a reload of 300,000
    reservations does. Called once the test's first device has its lease, so that only the
    reload under test waits."""
    originals = {}

    def slow() -> None:
        for host in ("pl-nat1", "pl-nat2"):
            path = LAB_VAR / host / "artefacts.json"
            originals[path] = path.read_text()
            spec = json.loads(originals[path])
            reload = spec["kea-dhcp4"]["reload"]
            spec["kea-dhcp4"]["reload"] = [
                "/bin/sh",
                "-c",
                f'sleep {SLOW_KEA}; exec "$0" "$@"',
                *reload,
            ]
            path.write_text(json.dumps(spec))

    yield slow
    for path, text in originals.items():
        path.write_text(text)
    wait_until(lambda: kea_served("pl-nat1") and kea_served("pl-nat2"), 60, 0.2)


def test_a_forward_goes_live_while_keas_reload_is_slow_and_the_reservation_still_reaches_kea(
    dhcp, slow_kea
):
    member = member_active()
    api = APIClient()
    api.force_authenticate(member.user)
    mac = "02:00:00:12:00:21"
    dhcp.append(mac)
    device = registered(member.room.building, client_api=api, name="console", mac=mac)
    assert wait_for_lease(mac, device["ipv4"], timeout=60) == device["ipv4"]
    assert wait_until(lambda: kea_served("pl-nat1") and kea_served("pl-nat2"), 60, 0.2)
    settled()
    slow_kea()
    server = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            ns_of(mac),
            "python3",
            "-c",
            SERVER,
            device["ipv4"],
            "80",
            "console",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # A new device: a reservation, so both hosts' Kea path starts its slow reload ...
        other = "02:00:00:12:00:22"
        dhcp.append(other)
        second = registered(member.room.building, client_api=api, name="laptop", mac=other)
        assert wait_until(lambda: kea_path("pl-nat1").get("state") == "loading", 20, 0.05)
        # ... and a forward made now goes live without waiting for either reload.
        started = time.monotonic()
        response = api.post(
            "/api/port-forwards/",
            {
                "device": device["id"],
                "protocol": "tcp",
                "public_ports": "8080",
                "target_ports": "80",
            },
            format="json",
        )
        assert response.status_code == 201, response.content
        public = member.public_ipv4.address
        live = wait_until(lambda: connect("pl-inet", public, 8080) == "hello from console", 30, 0.1)
        took = time.monotonic() - started
        reloading = [h for h in ("pl-nat1", "pl-nat2") if not kea_served(h)]
        print(f"forward live {took:.2f} s after the API call; Kea still reloading: {reloading}")  # noqa: T201
        logs = {
            h: (LAB_VAR / h / "fw" / "log.jsonl").read_text()[-2500:]
            for h in ("pl-nat1", "pl-nat2")
        }
        assert live, logs
        assert took < SLOW_KEA, logs
        assert reloading, "the forward should have gone live while a Kea reload still ran"
        # The reservation still reaches both Keas, after their reload.
        assert wait_until(lambda: kea_served("pl-nat1") and kea_served("pl-nat2"), 60, 0.2)
        assert kea_path("pl-nat1")["state"] == kea_path("pl-nat2")["state"] == "loaded"
        assert kea_reserves("pl-nat1", other)
        assert kea_reserves("pl-nat2", other)
        assert wait_for_lease(other, second["ipv4"]) == second["ipv4"]
    finally:
        server.kill()
        server.wait(timeout=5)


def test_a_failed_kea_reload_and_a_second_one_after_kea_recovered(dhcp):
    from apps.health.services import host_health_collect, host_warnings

    member = member_active()
    api = APIClient()
    api.force_authenticate(member.user)
    mac = "02:00:00:12:00:23"
    dhcp.append(mac)
    first = registered(member.room.building, client_api=api, name="one", mac=mac)
    assert wait_for_lease(mac, first["ipv4"]) == first["ipv4"]
    assert wait_until(lambda: kea_served("pl-nat1"), 30, 0.1)
    settled()

    # Kea dies on pl-nat1 (its process killed: portal-ra, which `lab.sh kea-stop` ends too,
    # keeps running, so the rest of the bundle applies as on a real host).
    pid = int((LAB_VAR / "pl-nat1" / "kea" / "kea.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not Path(f"/proc/{pid}").exists(), 10, 0.05)
    try:
        second_mac = "02:00:00:12:00:24"
        dhcp.append(second_mac)
        second = registered(member.room.building, client_api=api, name="two", mac=second_mac)
        # The push is not held up by Kea: both hosts confirm; pl-nat1's Kea path failed.
        failed = wait_until(
            lambda: kea_path("pl-nat1").get("state") == "not-answering" and kea_path("pl-nat1"),
            30,
            0.1,
        )
        assert failed, kea_path("pl-nat1")
        settled()
        nat1 = FirewallHost.objects.get(name="pl-nat1")
        assert nat1.push_status == "applied", nat1.error_reason
        # Staff see it on the host.
        sample = host_health_collect(host=nat1)
        codes = [w.code for w in host_warnings(host=nat1, sample=sample)]
        assert "dhcp-config" in codes, codes
        # pl-nat2's Kea serves the new device meanwhile.
        assert wait_for_lease(second_mac, second["ipv4"]) == second["ipv4"]
    finally:
        assert lab_sh("kea-restart", "nat1").returncode == 0
    # Kea is back: the path's next try (within 2-8 s) loads what was pushed ...
    assert wait_until(lambda: kea_path("pl-nat1").get("state") == "loaded", 40, 0.2), kea_path(
        "pl-nat1"
    )
    assert kea_reserves("pl-nat1", second_mac)
    # ... and a second change after the recovery reaches pl-nat1's Kea by its reload.
    third_mac = "02:00:00:12:00:25"
    dhcp.append(third_mac)
    before = kea_path("pl-nat1")["seq"]
    registered(member.room.building, client_api=api, name="three", mac=third_mac)
    assert wait_until(lambda: (kea_served("pl-nat1") or {}).get("seq", 0) > before, 30, 0.1), (
        kea_path("pl-nat1")
    )
    assert kea_path("pl-nat1")["state"] == "loaded"
    assert kea_reserves("pl-nat1", third_mac)


def test_lease_rounds_keep_their_connections_and_reconnect_after_a_host_went_away(hosts):
    """Issue 26: a lease round (every 15 s) reuses one SSH connection and agent per host
    (`LEASE_POOL`, apart from the rollouts' connections): no handshake per host and round. A
    host whose sshd restarted gets a new connection in the next round; one whose link went
    silent fails that round (after the connect time-out, never a hang) while the other host is
    read, and the round after it is back reads both from their cursors again."""
    from apps.dhcp.services import leases_collect
    from apps.firewall.transport import LEASE_POOL

    lab = json.loads((LAB_VAR / "lab.json").read_text())
    for entry in lab["hosts"]:
        FirewallHost.objects.filter(name=entry["name"]).update(serves_dhcp=True)
    LEASE_POOL.close()
    before = LEASE_POOL.handshakes

    def lease_round() -> list[tuple[str, bool, bool]]:
        return [(o.host, o.ok, o.full) for o in leases_collect()]

    try:
        assert lease_round() == [("pl-nat1", True, True), ("pl-nat2", True, True)]
        from_cursor = [("pl-nat1", True, False), ("pl-nat2", True, False)]
        agents = {key: agent.hello["pid"] for key, agent in LEASE_POOL.agents.items()}
        for _ in range(3):
            assert lease_round() == from_cursor
        assert LEASE_POOL.handshakes - before == 2  # one per host, in four rounds
        assert {key: a.hello["pid"] for key, a in LEASE_POOL.agents.items()} == agents

        # sshd restarted on nat1 (its sessions ended): the next round connects again.
        assert lab_sh("sshd-stop", "nat1").returncode == 0
        assert lab_sh("sshd-start", "nat1").returncode == 0
        assert lease_round() == from_cursor
        assert LEASE_POOL.handshakes - before == 3

        # nat1's link goes silent: that round fails for nat1 after the connect time-out and
        # reads nat2; once the link is back, the next rounds read both from their cursors.
        ip = ("ip", "-n", "pl-nat1", "link", "set", "mgmt0")
        try:
            assert run(*ip, "down").returncode == 0
            started = time.monotonic()
            assert lease_round() == [("pl-nat1", False, True), ("pl-nat2", True, False)]
            assert time.monotonic() - started < 30
        finally:
            run(*ip, "up")
        assert wait_until(lambda: lease_round() == from_cursor, 20, 0.5)
        assert lease_round() == from_cursor
    finally:
        LEASE_POOL.close()
