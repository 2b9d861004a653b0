"""Office-hours search: every kind of query finds the member; the pending queue."""

import ipaddress

import pytest
from django.urls import reverse

from apps.members.selectors import member_search, pending_queue
from apps.network.models import Device
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


def test_parts_of_rooms_macs_and_addresses_find_the_member_and_say_what_matched(volunteer, target):
    member, device = target
    label = member.room.label  # e.g. "A-101"
    prefix = ipaddress.IPv6Network(member.room.ipv6_prefix)
    groups = prefix.network_address.exploded.split(":")[:4]
    cases = {
        label.replace("-", "").lower(): f"room {label}",  # "a101"
        label.replace("-", " "): f"room {label}",  # "A 101"
        "00:11:22": f"MAC of device {device.name} (aa:bb:cc:00:11:22)",
        "cc-00-11": f"MAC of device {device.name} (aa:bb:cc:00:11:22)",
        "cc0011": f"MAC of device {device.name} (aa:bb:cc:00:11:22)",
        device.ipv4[:-1]: f"IPv4 of device {device.name} ({device.ipv4})",
        member.public_ipv4.address.rsplit(".", 1)[0] + ".": (
            f"public IPv4 ({member.public_ipv4.address})"
        ),
        ":".join(groups) + ":": f"room {label}'s /64 in this prefix",
        str(prefix): f"room {label}'s /64 in this prefix",
        "okafor": "name",
        "fatima.okafor@": "e-mail address",
        device.mac: f"MAC of device {device.name}",
    }
    for query, matched in cases.items():
        found = member_search(actor=volunteer, query=query)
        assert member.pk in [m.pk for m in found], query
        assert next(m for m in found if m.pk == member.pk).search_match == matched, query


def test_a_word_that_is_also_hex_finds_people_first_then_macs(volunteer):
    cafe = member_active(user=UserFactory(last_name="Cafe", roles=["member"]))
    owner = member_active()
    device_add(owner, mac="02:00:00:ca:fe:01")
    found = member_search(actor=volunteer, query="cafe")
    assert [m.pk for m in found] == [cafe.pk, owner.pk]
    assert [m.search_match for m in found] == [
        "name",
        f"MAC of device {owner.devices.get().name} (02:00:00:ca:fe:01)",
    ]


def test_fragments_that_match_nothing_find_nobody(volunteer, target):
    for query in ("ff:ee:dd", "10.254.", "2001:db8:ffff:ffff:", "z999"):
        assert member_search(actor=volunteer, query=query) == [], query


def test_the_results_table_shows_what_matched(client, volunteer, target):
    _member, device = target
    client.force_login(volunteer)
    page = client.get(reverse("members:office_hours"), {"q": "00:11:22"}).content.decode()
    assert f"Found by MAC of device {device.name} (aa:bb:cc:00:11:22)" in page
    client.cookies.load({"django_language": "de"})
    page = client.get(
        reverse("members:office_hours"), {"q": "00:11:22"}, HTTP_ACCEPT_LANGUAGE="de"
    ).content.decode()
    assert f"Gefunden über MAC von Gerät {device.name} (aa:bb:cc:00:11:22)" in page


def test_bytes_typed_with_separators_match_only_whole_bytes(volunteer):
    owner = member_active()
    device_add(owner, mac="02:00:00:66:f0:01")  # hex 02000066f001 holds "066f0" across bytes
    assert member_search(actor=volunteer, query="06:6f:00") == []
    assert [m.pk for m in member_search(actor=volunteer, query="66:f0:01")] == [owner.pk]


def test_a_dotted_mac_part_an_ipv6_suffix_and_a_device_name_find_the_member(volunteer, target):
    """Issue 25: a partial MAC in dotted notation ("aabb.cc"), the end of a device's IPv6
    address ("::1122" style interface suffix, or its last groups) and a device's name found
    nobody."""
    member, device = target
    Device.objects.filter(pk=device.pk).update(name="Living room TV")
    groups = ipaddress.IPv6Address(device.ipv6).exploded.split(":")
    last_two = ":".join(g.lstrip("0") or "0" for g in groups[-2:])
    for query in ("aabb.cc", "AABB.CC00", "::" + last_two, last_two, "living room", "room tv"):
        found = member_search(actor=volunteer, query=query)
        assert [m.pk for m in found] == [member.pk], query
    assert (
        "name of device Living room TV"
        in member_search(actor=volunteer, query="tv")[0].search_match
    )
    assert member_search(actor=volunteer, query="::ffff:1") == []
    assert member_search(actor=volunteer, query="nosuchdevice") == []
