"""Membership services: register, check in, test access, suspend, end; status history, audit."""

import datetime as dt

import pytest
from django.utils import timezone

from apps.audit.models import AuditEntry
from apps.members.choices import MemberStatus
from apps.members.models import RoomStay, StatusChange
from apps.members.services import (
    RegistrationError,
    member_check_in,
    member_end,
    member_register,
    member_suspend,
)
from apps.network.errors import MemberStateError
from apps.testaccess.services import member_test_access_grant
from tests.factories import MemberFactory, RoomFactory, UserFactory, member_active, pool_create

pytestmark = pytest.mark.django_db


def test_register_creates_a_pending_member_with_history_and_audit():
    actor = UserFactory(roles=["volunteer"])
    room = RoomFactory()
    member = member_register(
        first_name="Fatima", last_name="Okafor", email="F@Example.org", room=room, actor=actor
    )
    assert member.status == MemberStatus.PENDING
    assert member.user.email == "f@example.org"
    assert not member.user.has_usable_password()
    assert member.user.groups.filter(name="member").exists()
    assert RoomStay.objects.get(member=member).room == room
    entry = AuditEntry.objects.get(action="member.register")
    assert entry.actor == actor
    assert entry.changes["room"] == [None, room.label]
    with pytest.raises(RegistrationError):
        member_register(
            first_name="X", last_name="Y", email="f@example.org", room=room, actor=actor
        )


def test_check_in_activates_and_records_old_and_new_status():
    pool_create()
    actor = UserFactory(roles=["volunteer"])
    member = member_check_in(member=MemberFactory(), actor=actor)
    assert member.status == MemberStatus.ACTIVE
    assert member.checked_in_at
    change = StatusChange.objects.get(member=member)
    assert (change.old_status, change.new_status, change.actor) == ("pending", "active", actor)
    entry = AuditEntry.objects.get(action="member.active")
    assert entry.changes["status"] == ["pending", "active"]
    with pytest.raises(MemberStateError):
        member_check_in(member=member, actor=actor)


def test_test_access_needs_a_future_date_and_holds_a_public_address():
    pool_create()
    member = MemberFactory()
    with pytest.raises(MemberStateError, match="after today"):
        member_test_access_grant(member=member, until=timezone.localdate(), actor=None)
    member = member_test_access_grant(
        member=member, until=timezone.localdate() + dt.timedelta(days=7), actor=None
    )
    assert member.status == MemberStatus.TEST
    assert member.public_ipv4.address
    assert member_check_in(member=member, actor=None).test_access_until is None


def test_suspend_needs_a_reason_and_keeps_the_addresses():
    member = member_active()
    with pytest.raises(MemberStateError, match="why"):
        member_suspend(member=member, reason=" ", actor=None)
    member = member_suspend(member=member, reason="unpaid", actor=None)
    assert member.status == MemberStatus.SUSPENDED
    assert member.public_ipv4
    assert StatusChange.objects.filter(member=member, note="unpaid").exists()
    with pytest.raises(MemberStateError):
        member_suspend(member=member, reason="again", actor=None)
    assert member_check_in(member=member, actor=None).status == MemberStatus.ACTIVE


def test_end_closes_the_room_stay_and_cannot_repeat():
    member = member_active()
    RoomStay.objects.create(
        member=member, room=member.room, period=(timezone.now() - dt.timedelta(days=1), None)
    )
    member = member_end(member=member, actor=None)
    assert member.ended_at
    assert member.room is None
    assert RoomStay.objects.get(member=member).period.upper is not None
    with pytest.raises(MemberStateError, match="already ended"):
        member_end(member=member, actor=None)
