"""The address-holder history over time: every assignment, move, quarantine and reuse is
recorded by the services that make it, and a lookup at the edges of each period finds the right
holder (a period includes its start and excludes its end)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import IntegrityError, transaction
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange

from apps.abuse.choices import HolderKind, HoldingState, Verdict
from apps.abuse.models import AddressHolding
from apps.members.services import member_check_in, member_end, member_move
from apps.network.errors import MacInUse
from apps.network.services import device_change, device_remove
from tests.factories import (
    AddressHoldingFactory,
    BuildingFactory,
    RoomFactory,
    device_add,
    member_registered,
    pool_create,
)
from tests.integration.abuse.conftest import US

pytestmark = pytest.mark.django_db


def _plain(answer):
    return answer.verdict, answer.member, answer.room


def test_public_ipv4_assignment_quarantine_and_reuse_over_time(clock, lookup):
    pool_create("198.51.100.0/29")
    ann = member_registered(first_name="Ann")
    ann_room = ann.room.label
    t_ann = clock.now
    member_check_in(member=ann, actor=None)
    address = ann.public_ipv4.address
    t_end = clock.advance(days=10)
    member_end(member=ann, actor=None)
    quarantine_end = t_end + dt.timedelta(days=30)  # NetworkSettings.quarantine_days
    clock.advance(days=31)
    bob = member_registered(first_name="Bob")
    t_bob = clock.now
    member_check_in(member=bob, actor=None)
    assert bob.public_ipv4.address == address  # the same address, reused after its quarantine
    clock.advance(minutes=1)

    expected = [
        (t_ann - US, Verdict.NOBODY, None, ""),
        (t_ann, Verdict.HELD, ann, ann_room),
        (t_end - US, Verdict.HELD, ann, ann_room),
        (t_end, Verdict.QUARANTINED, None, ""),
        (quarantine_end - US, Verdict.QUARANTINED, None, ""),
        (quarantine_end, Verdict.NOBODY, None, ""),
        (t_bob - US, Verdict.NOBODY, None, ""),
        (t_bob, Verdict.HELD, bob, bob.room.label),
    ]
    answers = [(at, *_plain(lookup(address, at))) for at, *_ in expected]
    assert answers == expected
    quarantined = lookup(address, t_end)
    assert "quarantined" in quarantined.summary
    assert quarantined.holding.member_name.startswith("Ann")  # given back by Ann


def test_a_public_ipv4_answer_names_the_devices_and_room_of_that_time(clock, lookup):
    pool_create()
    ann = member_registered(first_name="Ann")
    member_check_in(member=ann, actor=None)
    laptop = device_add(ann, name="laptop")
    phone = device_add(ann, name="phone")
    t = clock.advance(hours=1)
    later = device_add(ann, name="added-later")
    clock.advance(hours=1)

    answer = lookup(ann.public_ipv4.address, t - US)
    assert answer.verdict == Verdict.HELD
    assert answer.member == ann
    assert answer.room == ann.room.label
    assert {(d.name, d.mac, d.ipv4, d.ipv6) for d in answer.devices} == {
        (laptop.name, laptop.mac, laptop.ipv4, laptop.ipv6),
        (phone.name, phone.mac, phone.ipv4, phone.ipv6),
    }
    assert later.name not in {d.name for d in lookup(ann.public_ipv4.address, t - US).devices}
    kinds = {(e.kind, e.role) for e in answer.evidence}
    assert {("holding", "answer"), ("holding", "device"), ("room_stay", "room")} <= kinds


def test_a_move_to_another_building_readdresses_the_devices_at_that_instant(clock, lookup):
    pool_create()
    room1, room2 = RoomFactory(), RoomFactory()  # each in a building of its own
    ann = member_registered(room=room1, first_name="Ann")
    member_check_in(member=ann, actor=None)
    laptop = device_add(ann, name="laptop")
    old4, old6 = laptop.ipv4, laptop.ipv6
    t_move = clock.advance(hours=5)
    member_move(member=ann, room=room2, actor=None)
    laptop.refresh_from_db()
    assert (laptop.ipv4, laptop.ipv6) != (old4, old6)
    clock.advance(minutes=1)

    for address in (old4, old6):
        before = lookup(address, t_move - US)
        assert (before.verdict, before.room) == (Verdict.HELD, room1.label)
        assert [d.name for d in before.devices] == ["laptop"]
        assert lookup(address, t_move).verdict == Verdict.NOBODY
    for address in (laptop.ipv4, laptop.ipv6):
        assert lookup(address, t_move - US).verdict == Verdict.NOBODY
        after = lookup(address, t_move)
        assert (after.verdict, after.room, after.member) == (Verdict.HELD, room2.label, ann)
    public = ann.public_ipv4.address  # kept across the move
    assert [(d.ipv4, d.ipv6) for d in lookup(public, t_move - US).devices] == [(old4, old6)]
    assert lookup(public, t_move - US).room == room1.label
    assert [(d.ipv4, d.ipv6) for d in lookup(public, t_move).devices] == [
        (laptop.ipv4, laptop.ipv6)
    ]
    assert lookup(public, t_move).room == room2.label


def test_a_removed_devices_private_address_goes_to_the_next_device(clock, lookup):
    pool_create()
    building = BuildingFactory()
    ann = member_registered(room=RoomFactory(building=building), first_name="Ann")
    bob = member_registered(room=RoomFactory(building=building), first_name="Bob")
    member_check_in(member=ann, actor=None)
    member_check_in(member=bob, actor=None)
    phone = device_add(ann, name="phone")
    address = phone.ipv4
    t_removed = clock.advance(days=1)
    device_remove(device=phone, actor=None)
    t_bob = clock.advance(hours=2)
    tv = device_add(bob, name="tv")
    assert tv.ipv4 == address
    clock.advance(minutes=1)

    ann_then = lookup(address, t_removed - US)
    assert (ann_then.verdict, ann_then.member) == (Verdict.HELD, ann)
    assert [(d.name, d.mac, d.exists) for d in ann_then.devices] == [("phone", phone.mac, False)]
    assert lookup(address, t_removed).verdict == Verdict.NOBODY
    assert lookup(address, t_bob - US).verdict == Verdict.NOBODY
    bob_now = lookup(address, t_bob)
    assert (bob_now.member, [d.name for d in bob_now.devices]) == (bob, ["tv"])


def test_a_new_mac_starts_new_rows_and_a_new_ipv6_address(clock, lookup):
    pool_create()
    ann = member_registered(first_name="Ann")
    member_check_in(member=ann, actor=None)
    laptop = device_add(ann, name="laptop", mac="02:00:00:aa:00:01")
    old6 = laptop.ipv6
    t = clock.advance(hours=1)
    device_change(device=laptop, mac="02:00:00:aa:00:02", actor=None)
    clock.advance(minutes=1)

    assert [d.mac for d in lookup(laptop.ipv4, t - US).devices] == ["02:00:00:aa:00:01"]
    assert [d.mac for d in lookup(laptop.ipv4, t).devices] == ["02:00:00:aa:00:02"]
    assert lookup(old6, t - US).holding.mac == "02:00:00:aa:00:01"
    after = lookup(old6, t)  # no device's address any more, but still in Ann's own /64
    assert (after.holding, after.member) == (None, ann)
    assert "is no device's registered address" in after.summary


def test_no_two_holders_of_one_address_at_once(clock):
    t = clock.now
    AddressHoldingFactory(period=DateTimeTZRange(t, t + dt.timedelta(hours=1)))
    AddressHoldingFactory(period=DateTimeTZRange(t + dt.timedelta(hours=1), None))  # adjacent
    AddressHoldingFactory(address="198.51.100.78", period=DateTimeTZRange(t, None))
    with pytest.raises(IntegrityError, match="addressholding_no_overlap"), transaction.atomic():
        AddressHoldingFactory(period=DateTimeTZRange(t + dt.timedelta(minutes=59), None))


def test_a_change_that_rolls_back_leaves_no_history(clock):
    pool_create()
    ann = member_registered()

    def check_in_then_fail() -> None:
        with transaction.atomic():
            member_check_in(member=ann, actor=None)
            assert AddressHolding.objects.filter(member=ann).exists()
            raise RuntimeError("after the assignment")

    with pytest.raises(RuntimeError):
        check_in_then_fail()
    assert not AddressHolding.objects.exists()
    member_check_in(member=ann, actor=None)
    laptop = device_add(ann)
    rows = AddressHolding.objects.count()
    with pytest.raises(MacInUse):
        device_add(ann, name="other", mac=laptop.mac)
    assert AddressHolding.objects.count() == rows


def test_a_test_access_ending_quarantines_the_address(clock, lookup):
    from apps.testaccess.services import member_test_access_end, member_test_access_grant

    pool_create()
    ann = member_registered(first_name="Ann")
    member_test_access_grant(
        member=ann, until=dt.date(2026, 3, 20), actor=None
    )  # START is 2026-03-02
    address = ann.public_ipv4.address
    t_end = clock.advance(days=3)
    member_test_access_end(member=ann, actor=None)
    clock.advance(minutes=1)
    assert lookup(address, t_end - US).verdict == Verdict.HELD
    assert lookup(address, t_end).verdict == Verdict.QUARANTINED
    rows = AddressHolding.objects.filter(address=address).order_by("period")
    assert [(r.state, r.period.lower, r.period.upper) for r in rows] == [
        (HoldingState.HELD, rows[0].period.lower, t_end),
        (HoldingState.QUARANTINED, t_end, t_end + dt.timedelta(days=30)),
    ]


def test_every_row_written_by_the_services_has_its_kind(clock):
    pool_create()
    ann = member_registered()
    member_check_in(member=ann, actor=None)
    device_add(ann)
    assert sorted(AddressHolding.objects.values_list("kind", flat=True)) == sorted(
        [HolderKind.PUBLIC_IPV4, HolderKind.PRIVATE_IPV4, HolderKind.IPV6]
    )


def test_a_temporary_ipv6_address_in_a_members_own_64_is_that_member(clock, lookup):
    import ipaddress

    pool_create()
    room = RoomFactory()
    ann = member_registered(room=room, first_name="Ann")
    member_check_in(member=ann, actor=None)
    t = clock.now
    laptop = device_add(ann, name="laptop")
    temporary = str(ipaddress.ip_network(room.ipv6_prefix)[0x1234_5678_9ABC])
    clock.advance(hours=1)

    assert lookup(temporary, t - US).verdict == Verdict.NOBODY  # no device in the /64 yet
    answer = lookup(temporary, t)
    assert (answer.verdict, answer.member, answer.room) == (Verdict.HELD, ann, room.label)
    assert [d.name for d in answer.devices] == ["laptop"]
    assert room.ipv6_prefix in answer.summary
    assert laptop.ipv6 in {e.what.split()[0] for e in answer.evidence}

    bob = member_registered(room=room, first_name="Bob")  # a double room: a shared /64
    member_check_in(member=bob, actor=None)
    t_shared = clock.advance(minutes=1)
    device_add(bob, name="tv")
    clock.advance(minutes=1)
    shared = lookup(temporary, t_shared)
    assert shared.verdict == Verdict.NOBODY
    assert any("shared by devices of several members" in note for note in shared.notes)
    assert lookup(temporary, t_shared - US).member == ann
