"""Device and address services: each rule and each refusal; nothing changes on a refusal."""

import datetime as dt

import pytest
from django.utils import timezone

from apps.audit.models import AuditEntry
from apps.members.choices import MemberStatus
from apps.members.services import member_check_in, member_end, member_move
from apps.network import errors
from apps.network.models import Device, NetworkSettings, PublicAddress, Subnet
from apps.network.services import InvalidMac, device_add, device_change, device_remove
from tests.factories import (
    BuildingFactory,
    MemberFactory,
    RoomFactory,
    member_active,
    pool_create,
)
from tests.factories import (
    device_add as add,
)

pytestmark = pytest.mark.django_db


def snapshot():
    return (
        list(Device.objects.order_by("pk").values_list("pk", "name", "mac", "ipv4", "ipv6")),
        list(
            PublicAddress.objects.order_by("pk").values_list(
                "address", "member_id", "quarantined_until"
            )
        ),
        AuditEntry.objects.count(),
    )


def test_device_gets_normalised_mac_and_addresses_from_building_and_room():
    member = member_active()
    device = device_add(member=member, name="laptop", mac="AABB.CCDD.EE00", actor=None)
    device.refresh_from_db()
    assert device.mac == "aa:bb:cc:dd:ee:00"
    subnet = Subnet.objects.get(building=member.room.building, family=4).network
    assert device.ipv4.rsplit(".", 1)[0] == subnet.rsplit(".", 1)[0]
    assert device.ipv4.endswith(".2")  # .1 is the gateway
    assert device.ipv6.startswith(member.room.ipv6_prefix.split("::")[0])
    assert device.ipv6.endswith("a8bb:ccff:fedd:ee00")  # EUI-64
    assert AuditEntry.objects.filter(action="device.add", member=member).exists()


def test_same_mac_in_another_notation_is_refused():
    a, b = member_active(), member_active()
    device_add(member=a, name="laptop", mac="aa:bb:cc:dd:ee:01", actor=None)
    before = snapshot()
    with pytest.raises(errors.MacInUse, match="already registered"):
        device_add(member=b, name="pc", mac="AA-BB-CC-DD-EE-01", actor=None)
    assert snapshot() == before


@pytest.mark.parametrize(
    ("mac", "why"),
    [
        ("01:00:5e:00:00:01", "multicast"),
        ("ff-ff-ff-ff-ff-ff", "broadcast"),
        ("000000000000", "all-zero"),
        ("nope", "not a MAC"),
    ],
)
def test_bad_macs_are_refused_with_the_reason(mac, why):
    member = member_active()
    with pytest.raises(InvalidMac, match=why):
        device_add(member=member, name="x", mac=mac, actor=None)
    assert not Device.objects.exists()


def test_device_limit_is_an_admin_setting():
    member = member_active()
    NetworkSettings.objects.filter(pk=1).update(device_limit=2)
    add(member)
    add(member)
    with pytest.raises(errors.DeviceLimitReached, match="at most 2"):
        add(member)
    assert member.devices.count() == 2


def test_default_device_limit_is_five():
    assert NetworkSettings.load().device_limit == 5
    member = member_active()
    for _ in range(5):
        add(member)
    with pytest.raises(errors.DeviceLimitReached):
        add(member)


def test_duplicate_device_name_for_one_member_is_refused():
    member = member_active()
    add(member, name="phone")
    with pytest.raises(errors.DeviceNameInUse):
        add(member, name="phone")


def test_room_without_subnet_is_refused_and_nothing_changes():
    room = RoomFactory(building=BuildingFactory(subnets=(None, None)))
    member = MemberFactory(room=room)
    pool_create()
    before = snapshot()
    with pytest.raises(errors.NoSubnet, match="no private IPv4 subnet"):
        device_add(member=member, name="x", mac="02:00:00:00:00:01", actor=None)
    with pytest.raises(errors.NoSubnet):
        member_check_in(member=member, actor=None)
    assert snapshot() == before
    member.refresh_from_db()
    assert member.status == MemberStatus.PENDING


def test_subnet_exhaustion_is_refused_and_nothing_changes():
    building = BuildingFactory(subnets=("10.100.9.0/29", None))  # hosts .2 .. .6 usable
    member = member_active(room=RoomFactory(building=building))
    NetworkSettings.objects.filter(pk=1).update(device_limit=10)
    for _ in range(5):
        add(member)
    before = snapshot()
    with pytest.raises(errors.SubnetExhausted, match="no free address"):
        add(member)
    assert snapshot() == before


def test_room_without_ipv6_prefix_gives_devices_no_ipv6():
    member = member_active(
        room=RoomFactory(building=BuildingFactory(subnets=("10.100.50.0/24", None)))
    )
    assert add(member).ipv6 is None


def test_change_mac_moves_the_ipv6_address_and_is_audited():
    member = member_active()
    device = add(member, name="pc", mac="02:00:00:00:aa:01")
    old_ipv6 = device.ipv6
    device_change(device=device, name="desktop", mac="02-00-00-00-AA-02", actor=None)
    device.refresh_from_db()
    assert (device.name, device.mac) == ("desktop", "02:00:00:00:aa:02")
    assert device.ipv6 != old_ipv6
    entry = AuditEntry.objects.get(action="device.change")
    assert entry.changes["name"] == ["pc", "desktop"]
    assert entry.changes["mac"] == ["02:00:00:00:aa:01", "02:00:00:00:aa:02"]


def test_change_to_a_mac_in_use_is_refused():
    member = member_active()
    add(member, mac="02:00:00:00:bb:01")
    device = add(member, mac="02:00:00:00:bb:02")
    with pytest.raises(errors.MacInUse):
        device_change(device=device, mac="0200.0000.bb01", actor=None)


def test_remove_frees_the_address_for_the_next_device():
    member = member_active()
    device = add(member)
    address = device.ipv4
    device_remove(device=device, actor=None)
    assert add(member).ipv4 == address
    assert AuditEntry.objects.filter(action="device.remove").exists()


def test_check_in_assigns_one_public_address_and_end_quarantines_it():
    member = member_active()
    address = PublicAddress.objects.get(member=member)
    assert address.address == "198.51.100.1"
    add(member)
    member_end(member=member, actor=None)
    address.refresh_from_db()
    member.refresh_from_db()
    assert address.member is None
    days = (address.quarantined_until - timezone.now()) / dt.timedelta(days=1)
    assert 29.9 < days <= 30
    assert member.status == MemberStatus.ENDED
    assert member.room is None
    assert not member.devices.exists()
    # A new member does not get the quarantined address.
    assert PublicAddress.objects.get(member=member_active()).address == "198.51.100.2"


def test_quarantine_length_is_an_admin_setting_and_expired_addresses_are_reused():
    NetworkSettings.objects.filter(pk=1).update(quarantine_days=0)
    member = member_active()
    member_end(member=member, actor=None)
    assert PublicAddress.objects.get(member=member_active()).address == "198.51.100.1"


def test_pool_exhaustion_and_full_quarantine_are_refused_and_nothing_changes():
    pool_create("198.51.100.0/30")  # two usable addresses
    first = member_active()
    member_active()
    waiting = MemberFactory()
    before = snapshot()
    with pytest.raises(errors.PoolExhausted, match="All public IPv4 addresses are in use"):
        member_check_in(member=waiting, actor=None)
    assert snapshot() == before
    member_end(member=first, actor=None)
    before = snapshot()
    with pytest.raises(errors.QuarantineFull, match="quarantine"):
        member_check_in(member=waiting, actor=None)
    assert snapshot() == before
    waiting.refresh_from_db()
    assert waiting.status == MemberStatus.PENDING


def test_move_gives_new_private_addresses_and_keeps_the_public_one():
    member = member_active()
    device = add(member)
    old_ipv4 = device.ipv4
    public = member.public_ipv4.address
    other_building_room = RoomFactory()
    member_move(member=member, room=other_building_room, actor=None)
    device.refresh_from_db()
    member.refresh_from_db()
    assert member.public_ipv4.address == public
    assert device.ipv4 != old_ipv4
    subnet = Subnet.objects.get(building=other_building_room.building, family=4).network
    assert device.ipv4.rsplit(".", 1)[0] == subnet.rsplit(".", 1)[0]
    assert device.ipv6.startswith(other_building_room.ipv6_prefix.split("::")[0])
    stay = member.room_stays.get()
    assert stay.room == other_building_room
    assert stay.period.upper is None
    assert AuditEntry.objects.filter(action="device.readdress", member=member).exists()


def test_move_within_the_building_keeps_ipv4_changes_ipv6():
    member = member_active()
    device = add(member)
    old = (device.ipv4, device.ipv6)
    member_move(member=member, room=RoomFactory(building=member.room.building), actor=None)
    device.refresh_from_db()
    assert device.ipv4 == old[0]
    assert device.ipv6 != old[1]


def test_move_to_a_room_without_subnet_is_refused():
    member = member_active()
    add(member)
    before = snapshot()
    with pytest.raises(errors.NoSubnet):
        member_move(
            member=member,
            room=RoomFactory(building=BuildingFactory(subnets=(None, None))),
            actor=None,
        )
    assert snapshot() == before
