"""Leases where staff and members look: the device row, the office-hours search, and the
unknown devices of a member's building with their one-click registration."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from apps.dhcp.models import RegistrationRange
from apps.dhcp.services import LeaseRow, leases_store
from apps.firewall.models import FirewallHost
from apps.network.models import Device
from tests.factories import UserFactory, device_add, member_active

pytestmark = pytest.mark.django_db


@pytest.fixture
def host():
    return FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11", serves_dhcp=True)


def lease(host, address, mac, minutes_ago=5, seconds=600):
    start = timezone.now() - dt.timedelta(minutes=minutes_ago)
    leases_store(
        host=host,
        rows=[LeaseRow(address, mac, start, start + dt.timedelta(seconds=seconds), "phone")],
    )


def test_the_device_row_says_which_host_gave_which_address_when(client, host):
    member = member_active()
    device = device_add(member, "laptop")
    lease(host, device.ipv4, device.mac)
    client.force_login(member.user)
    text = client.get("/me/").content.decode()
    assert f"got {device.ipv4} from pl-nat1 at" in text
    german = client.get("/me/", HTTP_ACCEPT_LANGUAGE="de").content.decode()
    assert f"hat {device.ipv4} von pl-nat1 bekommen" in german


def test_a_member_never_sees_another_members_leases(client, host):
    mine, theirs = member_active(), member_active()
    device_add(mine, "laptop")
    other = device_add(theirs, "tv")
    lease(host, other.ipv4, other.mac)
    client.force_login(mine.user)
    assert other.mac not in client.get("/me/").content.decode()


def test_office_hours_finds_leases_by_mac_and_address(client, host):
    member = member_active()
    device = device_add(member, "laptop")
    lease(host, device.ipv4, device.mac)
    lease(host, "10.100.250.9", "02:aa:00:00:00:09")
    client.force_login(UserFactory(roles=["volunteer"]))
    by_mac = client.get("/office-hours/", {"q": "02-AA-00-00-00-09"}).content.decode()
    assert "10.100.250.9" in by_mac
    assert "not registered" in by_mac
    by_address = client.get("/office-hours/", {"q": device.ipv4}).content.decode()
    assert "DHCP leases" in by_address
    assert device.mac in by_address
    assert f"/office-hours/members/{member.pk}/" in by_address


def test_a_volunteer_registers_an_unknown_device_of_the_building_with_a_click(client, host):
    member = member_active()
    RegistrationRange.objects.create(building=member.room.building, network="10.100.250.0/24")
    lease(host, "10.100.250.20", "02:aa:00:00:00:20")  # unknown, recent
    lease(host, "10.100.250.21", "02:aa:00:00:00:21", minutes_ago=600)  # long gone
    registered = device_add(member_active(), "tv", mac="02:aa:00:00:00:22")
    lease(host, "10.100.250.22", registered.mac)  # registered meanwhile: not "unknown"
    client.force_login(UserFactory(roles=["volunteer"]))
    page = client.get(f"/office-hours/members/{member.pk}/").content.decode()
    assert "Unknown devices in this building" in page
    assert "02:aa:00:00:00:20" in page
    assert "02:aa:00:00:00:21" not in page
    assert "02:aa:00:00:00:22" not in page
    response = client.post(
        f"/members/{member.pk}/devices/add/", {"mac": "02:aa:00:00:00:20", "name": "phone-0020"}
    )
    assert response.status_code in (302, 200)
    device = Device.objects.get(mac="02:aa:00:00:00:20")
    assert device.member == member
    page = client.get(f"/office-hours/members/{member.pk}/").content.decode()
    assert "No unknown device leased here lately" in page
