"""Resident dashboard and the member page: htmx partials, errors next to fields, actions."""

import pytest
from django.test import Client
from django.urls import reverse

from apps.members.choices import MemberStatus
from apps.network.models import Device
from tests.factories import MemberFactory, device_add, member_active, pool_create

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}


def login(user):
    client = Client()
    client.force_login(user)
    return client


def test_dashboard_shows_devices_and_all_addresses():
    member = member_active()
    device = device_add(member)
    body = login(member.user).get(reverse("members:dashboard")).content.decode()
    for text in (
        member.public_ipv4.address,
        device.ipv4,
        device.ipv6,
        device.mac,
        member.room.label,
        "Where do I find the MAC address?",
    ):
        assert text in body


def test_dashboard_empty_state():
    member = member_active()
    assert "No devices yet" in login(member.user).get(reverse("members:dashboard")).content.decode()


def test_dashboard_query_count_does_not_grow_with_devices(
    django_assert_max_num_queries, django_assert_num_queries
):
    member = member_active()
    client = login(member.user)
    device_add(member)
    client.get(reverse("members:dashboard"))
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as one:
        client.get(reverse("members:dashboard"))
    for _ in range(4):
        device_add(member)
    # Warm again, as before the first count: the device changes drop cached state (live
    # state, snapshot), and a cold cache costs a query whatever the number of devices.
    client.get(reverse("members:dashboard"))
    with CaptureQueriesContext(connection) as five:
        client.get(reverse("members:dashboard"))
    assert len(one) == len(five)
    # Session, login, roles, member, devices, settings, hosts (2), live state (2), leases,
    # forwards, blocked ports, openings, notices, traffic: the forms offer the devices already
    # read, and the traffic totals come from the daily series (22 before).
    assert len(one) <= 16, "\n".join(q["sql"][:120] for q in one.captured_queries)


def test_add_device_with_htmx_returns_the_section_and_errors_next_to_fields():
    member = member_active()
    client = login(member.user)
    url = reverse("network:device_add", args=[member.pk])
    response = client.post(url, {"name": "laptop", "mac": "AA-BB-CC-DD-EE-21"}, **HX)
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="devices"')
    assert "aa:bb:cc:dd:ee:21" in body
    assert "added" in body
    response = client.post(url, {"name": "phone", "mac": "01:00:5e:00:00:01"}, **HX)
    body = response.content.decode()
    assert 'id="add-mac-error"' in body
    assert "multicast" in body
    response = client.post(url, {"name": "phone", "mac": "aabb.ccdd.ee21"}, **HX)
    assert "already registered" in response.content.decode()
    assert Device.objects.count() == 1


def test_rename_inline_and_remove():
    member = member_active()
    device = device_add(member, name="old")
    client = login(member.user)
    form = client.get(reverse("network:device_edit", args=[device.pk]), **HX).content.decode()
    assert 'name="name"' in form
    assert 'value="old"' in form
    client.post(
        reverse("network:device_edit", args=[device.pk]), {"name": "new", "mac": device.mac}, **HX
    )
    device.refresh_from_db()
    assert device.name == "new"
    client.post(reverse("network:device_remove", args=[device.pk]), **HX)
    assert not Device.objects.exists()


def test_member_page_actions_and_audit(make_user):
    pool_create()
    member = MemberFactory()
    client = login(make_user(roles=("volunteer",)))
    url = reverse("members:member_detail", args=[member.pk])
    response = client.post(url, {"action": "check-in", "identity_checked": "on"})
    assert response.status_code == 302
    member.refresh_from_db()
    assert member.status == MemberStatus.ACTIVE
    body = client.get(url).content.decode()
    assert "Audit trail" in body
    assert f'checked in <a href="{url}">{member}</a>' in body  # the trail, as sentences
    assert "assigned the public address" in body
    # A wrong room: the message next to the field, nothing changed.
    response = client.post(url, {"action": "move", "room": "Z-999"})
    assert response.status_code == 422
    assert 'id="id_room-error"' in response.content.decode()
    response = client.post(url, {"action": "end"})
    assert response.status_code == 422
    member.refresh_from_db()
    assert member.status == MemberStatus.ACTIVE
    client.post(url, {"action": "end", "confirm": "on"})
    member.refresh_from_db()
    assert member.status == MemberStatus.ENDED


def at_the_desk(make_user, member):
    """A volunteer's client and the member's page."""
    return login(make_user(roles=("volunteer",))), reverse(
        "members:member_detail", args=[member.pk]
    )


def test_check_in_needs_the_identity_checked_box(make_user):
    """The server refuses a check-in without "identity checked", whatever the page sent."""
    pool_create()
    member = MemberFactory()
    client, url = at_the_desk(make_user, member)
    page = client.get(url).content.decode()
    assert "Check-in makes the membership of" in page  # the consequence, before the step
    assert 'name="identity_checked"' in page
    for data in ({"action": "check-in"}, {"action": "check-in", "next": "office-hours"}):
        refused = client.post(url, data)
        assert refused.status_code == 422
        body = refused.content.decode()
        said = "Tick “Identity checked” once you have seen the photo ID; nobody was checked in."
        assert body.count(said) == 2  # at the top and next to the box
        assert '<details class="check-in-step" id="check-in" open>' in body
        member.refresh_from_db()
        assert member.status == MemberStatus.PENDING
    done = client.post(url, {"action": "check-in", "identity_checked": "on"})
    assert done.status_code == 302
    member.refresh_from_db()
    assert member.status == MemberStatus.ACTIVE


def test_ending_a_membership_without_the_box_says_why_and_changes_nothing(make_user):
    pool_create()
    member = member_active()
    client, url = at_the_desk(make_user, member)
    refused = client.post(url, {"action": "end", "note": "moved out"})
    assert refused.status_code == 422
    said = "Tick the box to end the membership; nothing was changed. Ending cannot be undone."
    assert refused.content.decode().count(said) == 2
    member.refresh_from_db()
    assert member.status == MemberStatus.ACTIVE
    assert member.public_ipv4 is not None


def test_suspend_and_push_now_ask_first_naming_the_consequence(make_user):
    member = member_active()
    client = login(make_user(roles=("volunteer", "admin")))
    page = client.get(reverse("members:member_detail", args=[member.pk])).content.decode()
    assert f'data-confirm="Suspend {member}? The firewalls cut off all of their devices' in page
    hosts = client.get(reverse("firewall:host_list")).content.decode()
    assert 'data-confirm="Push to all firewalls now? The rule set is compiled' in hosts
    assert "portal/confirm.js" in hosts


def test_register_member_at_the_desk(make_user):
    from tests.factories import RoomFactory

    room = RoomFactory()
    client = login(make_user(roles=("volunteer",)))
    response = client.post(
        reverse("members:member_register"),
        {
            "first_name": "A",
            "last_name": "B",
            "email": "ab@example.org",
            "room": room.label.lower(),
        },
    )
    assert response.status_code == 302
    response = client.post(
        reverse("members:member_register"),
        {"first_name": "A", "last_name": "B", "email": "ab@example.org", "room": room.label},
    )
    assert response.status_code == 422
    assert "already an account" in response.content.decode()


def test_move_takes_the_room_as_search_does_and_warns_before_an_occupied_room():
    """Issue 25: the move form refused "b105", which the search takes, and moved a member into
    an occupied room without a word. Now "b105" is B-105; an occupied room is refused with who
    lives there and the free rooms of the building, until "Move anyway" is ticked (en + de)."""
    from apps.members.models import Room
    from tests.factories import BuildingFactory, RoomFactory, UserFactory

    building = BuildingFactory(code="Q")
    r105, r106, r107 = (RoomFactory(building=building, number=n) for n in ("105", "106", "107"))
    member = member_active()
    neighbour = member_active(room=r106)
    client = login(UserFactory(roles=["volunteer"]))
    url = reverse("members:member_move", args=[member.pk])
    response = client.post(url, {"room": "q105"})
    assert response.status_code == 302, response.content.decode()[:2000]
    member.refresh_from_db()
    assert member.room == r105

    refused = client.post(url, {"room": "Q 106"})
    assert refused.status_code == 422
    html = refused.content.decode()
    assert f"Q-106 is occupied: {neighbour} lives there." in html
    assert "Free rooms in this building: Q-107." in html  # not Q-105: the member lives there
    member.refresh_from_db()
    assert member.room == r105
    german = client.post(url, {"room": "Q 106"}, HTTP_ACCEPT_LANGUAGE="de").content.decode()
    assert "Q-106 ist belegt" in german
    assert "Freie Zimmer in diesem Haus: Q-107." in german

    moved = client.post(url, {"room": "q-106", "share": "on"})
    assert moved.status_code == 302
    member.refresh_from_db()
    assert member.room == r106
    assert Room.objects.get(pk=r107.pk).label == "Q-107"
    assert client.post(url, {"room": "zz999"}).status_code == 422  # no such room: refused
