"""Office-hours search: every kind of query finds the member; the pending queue."""

import ipaddress

import pytest
from django.urls import reverse

from apps.members.selectors import member_search, pending_queue
from tests.factories import MemberFactory, UserFactory, device_add, member_active

pytestmark = pytest.mark.django_db


@pytest.fixture
def volunteer():
    return UserFactory(roles=["volunteer"])


@pytest.fixture
def target():
    user = UserFactory(
        first_name="Fatima", last_name="Okafor", email="fatima.okafor@uni.example", roles=["member"]
    )
    member = member_active(user=user)
    member_active()  # someone else
    return member, device_add(member, mac="aa:bb:cc:00:11:22")


def queries(member, device):
    privacy = str(ipaddress.IPv6Network(member.room.ipv6_prefix).network_address + 0xDEAD_BEEF)
    return [
        "Fatima",
        "okafor",
        "fatima okafor",
        "OKAF",
        "fatima.okafor@uni",
        member.user.username,
        member.room.label,
        member.room.label.lower(),
        "aa:bb:cc:00:11:22",
        "AA-BB-CC-00-11-22",
        "aabb.cc00.1122",
        "AABBCC001122",
        device.ipv4,
        member.public_ipv4.address,
        device.ipv6,
        device.ipv6.upper(),
        privacy,
    ]


def test_every_kind_of_query_finds_the_member(volunteer, target):
    member, device = target
    for query in queries(member, device):
        assert [m.pk for m in member_search(actor=volunteer, query=query)] == [member.pk], query


def test_search_is_for_staff_only(target):
    member, _device = target
    assert member_search(actor=member.user, query="okafor") == []


def test_unknown_addresses_find_nobody(volunteer, target):
    for query in ("10.200.0.1", "2001:db8:ffff::1", "02:00:00:00:00:99", "nobody"):
        assert member_search(actor=volunteer, query=query) == []


def test_pending_queue_lists_oldest_first_and_checks_in(volunteer, client):
    from tests.factories import pool_create

    pool_create()
    first, second = MemberFactory(), MemberFactory()
    assert list(pending_queue(actor=volunteer)) == [first, second]
    client.force_login(volunteer)
    page = client.get(reverse("members:office_hours")).content.decode()
    assert "Waiting for check-in" in page
    assert str(first) in page
    client.post(
        reverse("members:member_detail", args=[first.pk]),
        {"action": "check-in", "next": "office-hours", "identity_checked": "on"},
    )
    assert list(pending_queue(actor=volunteer)) == [second]


def test_empty_queue_says_so(client_for):
    assert (
        "Nobody is waiting"
        in client_for("volunteer").get(reverse("members:office_hours")).content.decode()
    )
