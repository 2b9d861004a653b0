"""API: /api/port-forwards/, /api/ipv6-openings/, /api/test-accesses/ — ownership (404), refusals
as 400 with the field, staff-only test-access writes."""

import datetime as dt

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.members.choices import MemberStatus
from apps.network.models import BlockedPort, Ipv6Opening, NetworkSettings, PortForward
from tests.factories import (
    MemberFactory,
    UserFactory,
    device_add,
    forward_add,
    member_active,
    member_on_test,
    opening_add,
    pool_create,
)

pytestmark = pytest.mark.django_db


def api(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_resident_creates_changes_and_deletes_a_forward():
    member = member_active()
    device = device_add(member, name="srv")
    client = api(member.user)
    created = client.post(
        "/api/port-forwards/",
        {"device": device.pk, "protocol": "both", "public_ports": "8000-8010"},
        format="json",
    )
    assert created.status_code == 201, created.json()
    data = created.json()
    assert data["public_ports"] == "8000-8010"
    assert data["target_first"] == 8000
    assert data["public_address"] == member.public_ipv4.address
    assert data["device_name"] == "srv"
    pk = data["id"]
    changed = client.patch(f"/api/port-forwards/{pk}/", {"enabled": False}, format="json")
    assert changed.status_code == 200
    assert changed.json()["enabled"] is False
    listed = client.get("/api/port-forwards/").json()
    assert [f["id"] for f in listed["results"]] == [pk]
    assert client.delete(f"/api/port-forwards/{pk}/").status_code == 204
    assert not PortForward.objects.exists()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"public_ports": "0"}, "public_ports"),
        ({"public_ports": "65536"}, "public_ports"),
        ({"public_ports": "20-10"}, "public_ports"),
        ({"public_ports": "80", "target_ports": "80-81"}, "target_ports"),
        ({"public_ports": "135"}, "public_ports"),  # blocked
        ({"public_ports": "8080"}, "public_ports"),  # overlap
        ({"public_ports": "81", "protocol": "icmp"}, "protocol"),
    ],
)
def test_refusals_are_400_with_the_field(data, field):
    BlockedPort.objects.create(direction="inbound", protocol="tcp", first=135, last=139)
    member = member_active()
    device = device_add(member)
    forward_add(member, device, ports="8080")
    response = api(member.user).post(
        "/api/port-forwards/", {"device": device.pk, "protocol": "tcp", **data}, format="json"
    )
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert PortForward.objects.count() == 1


def test_overlap_refusal_names_the_forward_and_never_another_member():
    member = member_active()
    device = device_add(member, name="box")
    forward_add(member, device, ports="8080")
    response = api(member.user).post(
        "/api/port-forwards/",
        {"device": device.pk, "protocol": "both", "public_ports": "8080"},
        format="json",
    )
    message = response.json()["public_ports"][0]
    assert "8080" in message
    assert "box" in message
    assert str(member) not in message


def test_over_the_limit_is_400():
    NetworkSettings.objects.filter(pk=1).update(port_forward_limit=1)
    member = member_active()
    device = device_add(member)
    forward_add(member, device, ports="1")
    response = api(member.user).post(
        "/api/port-forwards/", {"device": device.pk, "protocol": "tcp", "public_ports": "2"}
    )
    assert response.status_code == 400
    assert "public_ports" in response.json()


def test_another_members_device_or_an_inactive_one_is_400_on_device():
    member, other = member_active(), member_active()
    foreign = device_add(other)
    response = api(member.user).post(
        "/api/port-forwards/", {"device": foreign.pk, "protocol": "tcp", "public_ports": "80"}
    )
    assert response.status_code == 400
    assert "device" in response.json()
    from apps.members.services import member_suspend

    own = device_add(member)
    member_suspend(member=member, reason="x", actor=None)
    response = api(member.user).post(
        "/api/port-forwards/", {"device": own.pk, "protocol": "tcp", "public_ports": "80"}
    )
    assert response.status_code == 400
    assert "device" in response.json()


def test_forwards_and_openings_of_another_member_are_404():
    owner = member_active()
    device = device_add(owner)
    forward = forward_add(owner, device)
    opening = opening_add(device)
    intruder = api(member_active().user)
    for url in (f"/api/port-forwards/{forward.pk}/", f"/api/ipv6-openings/{opening.pk}/"):
        assert intruder.get(url).status_code == 404
        assert intruder.patch(url, {"enabled": False}, format="json").status_code == 404
        assert intruder.delete(url).status_code == 404
    assert intruder.get("/api/port-forwards/").json()["results"] == []
    assert intruder.get("/api/ipv6-openings/").json()["results"] == []
    assert PortForward.objects.get().enabled
    assert Ipv6Opening.objects.get().enabled


def test_staff_see_all_and_filter_by_member(make_user):
    a, b = member_active(), member_active()
    forward_add(a)
    forward_add(b)
    client = api(make_user(roles=("support",)))
    assert client.get("/api/port-forwards/").json()["count"] == 2
    assert client.get(f"/api/port-forwards/?member={a.pk}").json()["count"] == 1


def test_openings_api_all_ports_and_refusals():
    member = member_active()
    device = device_add(member)
    client = api(member.user)
    created = client.post(
        "/api/ipv6-openings/",
        {"device": device.pk, "protocol": "both", "ports": None},
        format="json",
    )
    assert created.status_code == 201
    assert created.json()["all_ports"] is True
    overlap = client.post(
        "/api/ipv6-openings/", {"device": device.pk, "protocol": "tcp", "ports": "22"}
    )
    assert overlap.status_code == 400
    assert "ports" in overlap.json()
    all_tcp = client.post("/api/ipv6-openings/", {"device": device.pk, "protocol": "tcp"})
    assert all_tcp.status_code == 400
    assert "protocol" in all_tcp.json()
    bad = client.post("/api/ipv6-openings/", {"device": device.pk, "protocol": "tcp", "ports": "0"})
    assert bad.status_code == 400
    assert "ports" in bad.json()
    pk = created.json()["id"]
    changed = client.patch(
        f"/api/ipv6-openings/{pk}/", {"ports": "443", "protocol": "tcp"}, format="json"
    )
    assert changed.status_code == 200
    assert changed.json()["ports"] == "443"


def test_test_access_api_staff_grant_extend_end(make_user):
    pool_create()
    member = MemberFactory()
    client = api(make_user(roles=("volunteer",)))
    until = timezone.localdate() + dt.timedelta(days=5)
    granted = client.post(
        "/api/test-accesses/", {"member": member.pk, "until": str(until)}, format="json"
    )
    assert granted.status_code == 201, granted.json()
    assert granted.json()["until"] == str(until)
    assert granted.json()["down_kbit"] == 4000
    refused = client.patch(
        f"/api/test-accesses/{member.pk}/", {"until": str(timezone.localdate())}, format="json"
    )
    assert refused.status_code == 400
    assert "until" in refused.json()
    extended = client.patch(
        f"/api/test-accesses/{member.pk}/",
        {"until": str(until + dt.timedelta(days=3))},
        format="json",
    )
    assert extended.status_code == 200
    assert client.delete(f"/api/test-accesses/{member.pk}/").status_code == 204
    member.refresh_from_db()
    assert member.status == MemberStatus.PENDING
    assert client.get(f"/api/test-accesses/{member.pk}/").status_code == 404


def test_test_access_api_ownership():
    mine = member_on_test()
    other = member_on_test()
    client = api(mine.user)
    assert client.get(f"/api/test-accesses/{mine.pk}/").status_code == 200
    assert client.get(f"/api/test-accesses/{other.pk}/").status_code == 404
    assert (
        client.patch(f"/api/test-accesses/{other.pk}/", {"until": "2099-01-01"}).status_code == 404
    )
    assert client.delete(f"/api/test-accesses/{other.pk}/").status_code == 404
    assert [m["member"] for m in client.get("/api/test-accesses/").json()["results"]] == [mine.pk]
    # A member may read their own test access but not change it.
    assert client.delete(f"/api/test-accesses/{mine.pk}/").status_code == 403
    assert (
        client.post("/api/test-accesses/", {"member": mine.pk, "until": "2099-01-01"}).status_code
        == 403
    )


def test_anonymous_gets_401():
    client = APIClient()
    for url in ("/api/port-forwards/", "/api/ipv6-openings/", "/api/test-accesses/"):
        assert client.get(url).status_code == 401
    assert UserFactory
