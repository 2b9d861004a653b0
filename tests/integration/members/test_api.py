"""API: members, rooms, devices (filtering, pagination, creation rules, OpenAPI)."""

import pytest
from django.core.management import call_command
from django.test import Client

from tests.factories import RoomFactory, device_add, member_active

pytestmark = pytest.mark.django_db


def login(user):
    client = Client()
    client.force_login(user)
    return client


def test_a_members_own_record_shows_every_address_and_email():
    member = member_active()
    device = device_add(member)
    data = login(member.user).get(f"/api/members/{member.pk}/").json()
    assert data["email"] == member.user.email
    assert data["public_ipv4"] == member.public_ipv4.address
    assert data["devices"] == [
        {
            "id": device.pk,
            "name": device.name,
            "mac": device.mac,
            "ipv4": device.ipv4,
            "ipv6": device.ipv6,
        }
    ]
    assert data["room"] == member.room.label


def test_resident_creates_a_device_with_name_and_mac_only():
    member = member_active()
    response = login(member.user).post(
        "/api/devices/", {"name": "phone", "mac": "AABB.CCDD.EE11"}, content_type="application/json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["member"] == member.pk
    assert response.json()["mac"] == "aa:bb:cc:dd:ee:11"


def test_refusals_are_400_with_the_field():
    member = member_active()
    client = login(member.user)
    response = client.post(
        "/api/devices/", {"name": "x", "mac": "01:00:5e:00:00:01"}, content_type="application/json"
    )
    assert response.status_code == 400
    assert "multicast" in response.json()["mac"][0]


def test_staff_name_the_member_and_filter(make_user):
    member = member_active()
    staff = login(make_user(roles=("volunteer",)))
    assert (
        staff.post(
            "/api/devices/",
            {"name": "x", "mac": "02:00:00:00:77:01"},
            content_type="application/json",
        ).status_code
        == 400
    )
    response = staff.post(
        "/api/devices/",
        {"name": "x", "mac": "02:00:00:00:77:01", "member": member.pk},
        content_type="application/json",
    )
    assert response.status_code == 201
    assert staff.get("/api/devices/", {"mac": "0200.0000.7701"}).json()["count"] == 1
    assert staff.get("/api/members/", {"status": "active"}).json()["count"] == 1
    assert staff.get("/api/members/", {"status": "pending"}).json()["count"] == 0
    RoomFactory(building=member.room.building)
    rooms = staff.get("/api/rooms/", {"building": member.room.building.code}).json()
    assert rooms["count"] == 2
    assert "next" in rooms
    patched = staff.patch(
        f"/api/devices/{response.json()['id']}/",
        {"name": "renamed"},
        content_type="application/json",
    )
    assert patched.json()["name"] == "renamed"
    assert staff.delete(f"/api/devices/{response.json()['id']}/").status_code == 204


def test_openapi_schema_is_valid(tmp_path):
    call_command("spectacular", "--validate", "--file", str(tmp_path / "schema.yml"))
    text = (tmp_path / "schema.yml").read_text()
    for path in ("/api/members/", "/api/rooms/", "/api/devices/"):
        assert path in text


def test_anonymous_gets_401():
    assert Client().get("/api/devices/").status_code == 401
