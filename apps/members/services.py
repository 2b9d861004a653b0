"""Writes to memberships: register, check in, move, suspend, end (test accesses: testaccess).

Each is one transaction with audit rows. The parts of the apps built on members (network:
subnets, addresses, devices; testaccess) run through apps/members/extensions.py at the same
points, and writes that change network state end with `member_changed` (network schedules its
single `network_changed` hook for after the commit).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.postgres.fields.ranges import DateTimeTZRange
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.accounts.roles import Role
from apps.audit.services import audit_changes, audit_record
from apps.core.errors import NetworkError
from apps.members.choices import MemberStatus
from apps.members.errors import MemberStateError
from apps.members.extensions import member_extensions
from apps.members.models import Building, Member, Room, RoomStay, StatusChange

if TYPE_CHECKING:
    from django.contrib.auth.models import User

User = get_user_model()


class RegistrationError(NetworkError):
    """The registration data conflicts with an existing account."""


def member_lock(member: Member) -> Member:
    """The member row, locked for the rest of the transaction (with login, room and building)."""
    return (
        Member.objects.select_for_update(of=("self",))
        .select_related("user", "room__building")
        .get(pk=member.pk)
    )


def member_status_set(
    member: Member,
    new: str,
    *,
    actor: User | None,
    note: str = "",
    extra: dict[str, Any] | None = None,
) -> None:
    """Change the status, write the history row and the audit row (inside the caller's atomic)."""
    now = timezone.now()
    old = member.status
    before = {"status": old, **{k: getattr(member, k) for k in (extra or {})}}
    member.status, member.status_since = new, now
    for key, value in (extra or {}).items():
        setattr(member, key, value)
    member.save(update_fields=["status", "status_since", *(extra or {})])
    StatusChange.objects.create(
        member=member, old_status=old, new_status=new, at=now, actor=actor, note=note[:200]
    )
    after = {"status": new, **(extra or {})}
    changes = audit_changes(before, after)
    if note:
        changes["note"] = [None, note]
    audit_record(actor=actor, action=f"member.{new}", obj=member, changes=changes, member=member)


def member_status_require(member: Member, *allowed: str, action: str) -> None:
    """Refuse (MemberStateError) `action` unless the membership's status is one of `allowed`."""
    if member.status not in allowed:
        raise MemberStateError(
            _("%(action)s is not possible while the membership is “%(status)s”.")
            % {"action": action, "status": member.get_status_display()}
        )


@transaction.atomic
def member_register(
    *,
    first_name: str,
    last_name: str,
    email: str,
    room: Room,
    actor: User | None,
    phone: str = "",
    username: str = "",
) -> Member:
    """A new pending member with a login (no password yet: they set one by password reset)."""
    email = email.strip().lower()
    username = (username or email).strip()
    if User.objects.filter(username__iexact=username).exists():
        raise RegistrationError(
            _("There is already an account with this e-mail address."), field="email"
        )
    if User.objects.filter(email__iexact=email).exists():
        raise RegistrationError(
            _("There is already an account with this e-mail address."), field="email"
        )
    user = User.objects.create_user(
        username=username,
        email=email,
        first_name=first_name.strip(),
        last_name=last_name.strip(),
        password=None,
    )
    user.groups.add(Group.objects.get_or_create(name=Role.MEMBER)[0])
    now = timezone.now()
    member = Member.objects.create(
        user=user,
        room=room,
        status=MemberStatus.PENDING,
        status_since=now,
        registered_at=now,
        phone=phone.strip(),
    )
    RoomStay.objects.create(member=member, room=room, period=DateTimeTZRange(now, None))
    StatusChange.objects.create(
        member=member, old_status="", new_status=MemberStatus.PENDING, at=now, actor=actor
    )
    audit_record(
        actor=actor,
        action="member.register",
        obj=member,
        changes=audit_changes(
            {},
            {"name": user.get_full_name(), "email": email, "room": room.label, "phone": phone},
        ),
        member=member,
    )
    return member


@transaction.atomic
def member_update_contact(*, member: Member, actor: User, email: str, phone: str) -> Member:
    """Change a member's e-mail address and phone number."""
    member = member_lock(member)
    user = member.user
    email = email.strip().lower()
    if User.objects.filter(email__iexact=email).exclude(pk=user.pk).exists():
        raise RegistrationError(
            _("There is already an account with this e-mail address."), field="email"
        )
    before = {"email": user.email, "phone": member.phone}
    user.email, member.phone = email, phone.strip()
    user.save(update_fields=["email"])
    member.save(update_fields=["phone"])
    changes = audit_changes(before, {"email": user.email, "phone": member.phone})
    if changes:
        audit_record(
            actor=actor, action="member.contact", obj=member, changes=changes, member=member
        )
    return member


@transaction.atomic
def member_check_in(*, member: Member, actor: User) -> Member:
    """Activate a membership and give it its public IPv4 (kept if it already has one)."""
    member = member_lock(member)
    member_status_require(
        member,
        MemberStatus.PENDING,
        MemberStatus.TEST,
        MemberStatus.SUSPENDED,
        action=_("Checking in"),
    )
    for extension in member_extensions():
        extension.member_checking_in(member=member, actor=actor)  # subnet, public IPv4
    extra: dict[str, Any] = {"test_access_until": None}
    if member.checked_in_at is None:
        extra["checked_in_at"] = timezone.now()
    member_status_set(member, MemberStatus.ACTIVE, actor=actor, extra=extra)
    member_changed(cause=f"member.check_in {member.pk}", actor=actor)
    return member


@transaction.atomic
def member_suspend(*, member: Member, reason: str, actor: User) -> Member:
    """Suspend an active membership (addresses stay reserved; the firewall cuts it off)."""
    member = member_lock(member)
    member_status_require(member, MemberStatus.ACTIVE, MemberStatus.TEST, action=_("Suspending"))
    if not reason.strip():
        raise MemberStateError(_("Say why the membership is suspended."), field="reason")
    member_status_set(member, MemberStatus.SUSPENDED, actor=actor, note=reason.strip())
    member_changed(cause=f"member.suspend {member.pk}", actor=actor)
    return member


@transaction.atomic
def member_move(*, member: Member, room: Room, actor: User) -> Member:
    """Move to another room: new private addresses for the devices, the same public IPv4."""
    member = member_lock(member)
    if member.is_ended:
        raise MemberStateError(_("An ended membership cannot move."), field="room")
    if member.room_id == room.pk:
        raise MemberStateError(
            _("%(member)s already lives in %(room)s.") % {"member": member, "room": room.label},
            field="room",
        )
    room = Room.objects.select_related("building").get(pk=room.pk)
    old_room = member.room
    for extension in member_extensions():
        extension.member_moving(member=member, room=room, actor=actor)  # subnet, new addresses
    now = timezone.now()
    _close_stay(member, now)
    RoomStay.objects.create(member=member, room=room, period=DateTimeTZRange(now, None))
    member.room = room
    member.save(update_fields=["room"])
    audit_record(
        actor=actor,
        action="member.move",
        obj=member,
        changes={"room": [old_room.label if old_room else None, room.label]},
        member=member,
    )
    member_changed(cause=f"member.move {member.pk}", actor=actor)
    return member


def _close_stay(member: Member, now: dt.datetime) -> None:
    stay = RoomStay.objects.filter(member=member, period__upper_inf=True).first()
    if stay is not None:
        stay.period = DateTimeTZRange(stay.period.lower, now)
        stay.save(update_fields=["period"])


@transaction.atomic
def member_end(*, member: Member, actor: User, note: str = "") -> Member:
    """End a membership: public IPv4 to quarantine, devices removed, room given up."""
    member = member_lock(member)
    if member.is_ended:
        raise MemberStateError(_("This membership has already ended."))
    now = timezone.now()
    for extension in member_extensions():
        extension.member_ending(member=member, actor=actor)  # forwards, public IPv4, devices
    _close_stay(member, now)
    member_status_set(
        member,
        MemberStatus.ENDED,
        actor=actor,
        note=note,
        extra={"ended_at": now, "room": None, "test_access_until": None},
    )
    member_changed(cause=f"member.end {member.pk}", actor=actor)
    return member


def member_changed(*, cause: str, actor: User | None) -> None:
    """Tell the apps built on members that network state changed (inside the transaction:
    network's hook runs once after the commit)."""
    for extension in member_extensions():
        extension.member_changed(cause=cause, actor=actor)


def _room_prefix(building: Building) -> str | None:
    """The first IPv6 /64 an extension offers for a new room of `building` (network: the next
    free /64 of the building's prefix), or None."""
    for extension in member_extensions():
        prefix = extension.room_prefix(building=building)
        if prefix is not None:
            return prefix
    return None


@transaction.atomic
def building_create(*, code: str, name: str, actor: User, address: str = "") -> Building:
    """A new building (its subnets are added with network.services.subnet_create)."""
    building = Building.objects.create(code=code.strip(), name=name.strip(), address=address)
    audit_record(
        actor=actor,
        action="building.create",
        obj=building,
        changes=audit_changes({}, {"code": building.code, "name": building.name}),
    )
    return building


@transaction.atomic
def room_create(*, building: Building, number: str, actor: User) -> Room:
    """A new room with its IPv6 /64 from the building's prefix (when the building has one)."""
    number = number.strip()
    if Room.objects.filter(building=building, number=number).exists():
        raise NetworkError(
            _("Room %(room)s already exists.") % {"room": Room.make_label(building.code, number)},
            field="number",
        )
    room = Room.objects.create(
        building=building,
        number=number,
        label=Room.make_label(building.code, number),
        ipv6_prefix=_room_prefix(building),
    )
    audit_record(
        actor=actor,
        action="room.create",
        obj=room,
        changes=audit_changes({}, {"label": room.label, "ipv6_prefix": room.ipv6_prefix}),
    )
    return room
