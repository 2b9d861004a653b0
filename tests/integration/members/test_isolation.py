"""Member A against member B's objects: 404 in every view and API endpoint."""

import pytest
from django.test import Client
from django.urls import reverse

from apps.network.models import Device
from tests.factories import device_add, member_active

pytestmark = pytest.mark.django_db


@pytest.fixture
def two():
    a, b = member_active(), member_active()
    da, db = device_add(a), device_add(b)
    client = Client()
    client.force_login(a.user)
    return client, a, b, da, db


def test_views_answer_404_for_someone_elses_objects(two):
    client, a, b, _da, db = two
    hx = {"HTTP_HX_REQUEST": "true"}
    assert client.get(reverse("network:device_section", args=[b.pk]), **hx).status_code == 404
    assert (
        client.post(
            reverse("network:device_add", args=[b.pk]),
            {"name": "x", "mac": "02:00:00:00:99:01"},
            **hx,
        ).status_code
        == 404
    )
    assert client.get(reverse("network:device_edit", args=[db.pk]), **hx).status_code == 404
    assert (
        client.post(
            reverse("network:device_edit", args=[db.pk]), {"name": "x", "mac": db.mac}, **hx
        ).status_code
        == 404
    )
    assert client.post(reverse("network:device_remove", args=[db.pk]), **hx).status_code == 404
    assert client.get(reverse("members:member_detail", args=[b.pk])).status_code == 404
    assert (
        client.post(
            reverse("members:member_detail", args=[b.pk]), {"action": "end", "confirm": "on"}
        ).status_code
        == 404
    )
    # A member's own member page is a staff tool as well.
    assert client.get(reverse("members:member_detail", args=[a.pk])).status_code == 404
    assert Device.objects.filter(pk=db.pk, name=db.name).exists()
    body = client.get(reverse("members:dashboard")).content.decode()
    assert db.mac not in body
    assert b.public_ipv4.address not in body


def test_api_answers_404_for_someone_elses_objects(two):
    client, a, b, da, db = two
    assert client.get(f"/api/members/{b.pk}/").status_code == 404
    assert client.get(f"/api/rooms/{b.room.pk}/").status_code == 404
    assert client.get(f"/api/devices/{db.pk}/").status_code == 404
    assert (
        client.patch(
            f"/api/devices/{db.pk}/", {"name": "mine"}, content_type="application/json"
        ).status_code
        == 404
    )
    assert client.delete(f"/api/devices/{db.pk}/").status_code == 404
    assert (
        client.post(
            "/api/devices/",
            {"name": "x", "mac": "02:00:00:00:99:02", "member": b.pk},
            content_type="application/json",
        ).status_code
        == 404
    )
    assert Device.objects.filter(pk=db.pk, name=db.name).exists()
    # Lists contain only their own objects.
    assert [m["id"] for m in client.get("/api/members/").json()["results"]] == [a.pk]
    assert [r["id"] for r in client.get("/api/rooms/").json()["results"]] == [a.room.pk]
    assert [d["id"] for d in client.get("/api/devices/").json()["results"]] == [da.pk]
    assert client.get("/api/devices/", {"member": b.pk}).json()["results"] == []
    assert client.get("/api/devices/", {"mac": db.mac}).json()["results"] == []
