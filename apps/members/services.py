"""Writes to memberships: register, check in, test access, move, suspend, end.

Each is one transaction with audit rows; those that change network state schedule the single
`network_changed` hook for after the commit.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.postgres.fields.ranges import DateTimeTZRange
from django.db import transaction
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _

from apps.accounts.roles import Role
from apps.audit.services import audit_changes, audit_record
from apps.members.choices import MemberStatus
from apps.members.models import Building, Member, Room, RoomStay, StatusChange
from apps.network.errors import MemberStateError, NetworkError
from apps.network.hooks import network_changed_on_commit
from apps.network.models import Device, ShapingProfile, TestAccess
from apps.network.services import (
    _device_delete,
    devices_readdress,
    port_forwards_release,
    public_ipv4_allocate,
    public_ipv4_release,
    room_ipv6_prefix_next,
    room_require_subnet,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

User = get_user_model()


class RegistrationError(NetworkError):
    """The registration data conflicts with an existing account."""


def _lock(member: Member) -> Member:
    return (
        Member.objects.select_for_update(of=("self",))
        .select_related("user", "room__building")
        .get(pk=member.pk)
    )


def _set_status(
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


def _refuse_unless(member: Member, *allowed: str, action: str) -> None:
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
    member = _lock(member)
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
    member = _lock(member)
    _refuse_unless(
        member,
        MemberStatus.PENDING,
        MemberStatus.TEST,
        MemberStatus.SUSPENDED,
        action=_("Checking in"),
    )
    room_require_subnet(room=member.room)
    public_ipv4_allocate(member=member, actor=actor)
    extra: dict[str, Any] = {"test_access_until": None}
    if member.checked_in_at is None:
        extra["checked_in_at"] = timezone.now()
    _set_status(member, MemberStatus.ACTIVE, actor=actor, extra=extra)
    TestAccess.objects.filter(member=member).delete()  # no longer shaped
    network_changed_on_commit(cause=f"member.check_in {member.pk}", actor=actor)
    return member


def _test_access_profile(profile: ShapingProfile | None) -> ShapingProfile:
    return profile if profile is not None else ShapingProfile.default()


def _test_access_until_check(until: dt.date) -> None:
    from apps.network.models import NetworkSettings

    today = timezone.localdate()
    if until <= today:
        raise MemberStateError(_("The test access must end after today."), field="until")
    longest = NetworkSettings.load().test_access_max_days
    if until > today + dt.timedelta(days=longest):
        raise MemberStateError(
            _("A test access may last at most %(days)s days: until %(last)s at the latest.")
            % {"days": longest, "last": date_format(today + dt.timedelta(days=longest))},
            field="until",
        )


@transaction.atomic
def member_test_access_grant(
    *, member: Member, until: dt.date, actor: User, profile: ShapingProfile | None = None
) -> Member:
    """A test access until `until` (its last day), shaped by `profile` (default: the default
    profile); assigns the public IPv4. Granting again to a test member changes both."""
    member = _lock(member)
    _refuse_unless(member, MemberStatus.PENDING, MemberStatus.TEST, action=_("A test access"))
    _test_access_until_check(until)
    profile = _test_access_profile(profile)
    if (
        member.status == MemberStatus.TEST
        and member.test_access_until == until
        and TestAccess.objects.filter(member=member, profile=profile).exists()
    ):
        return member  # the same grant again (a double submit): no second history entry
    room_require_subnet(room=member.room)
    public_ipv4_allocate(member=member, actor=actor)
    old_profile = TestAccess.objects.filter(member=member).select_related("profile").first()
    _set_status(member, MemberStatus.TEST, actor=actor, extra={"test_access_until": until})
    TestAccess.objects.update_or_create(
        member=member,
        defaults={"profile": profile, "granted_at": timezone.now(), "notice_sent_for": None},
    )
    if old_profile is None or old_profile.profile_id != profile.pk:
        audit_record(
            actor=actor,
            action="member.test_access_profile",
            obj=member,
            changes={"profile": [old_profile.profile.name if old_profile else None, profile.name]},
            member=member,
        )
    network_changed_on_commit(cause=f"member.test_access {member.pk}", actor=actor)
    return member


@transaction.atomic
def member_test_access_extend(
    *, member: Member, until: dt.date, actor: User, profile: ShapingProfile | None = None
) -> Member:
    """Move the end of a running test access (and change its profile when one is given)."""
    member = _lock(member)
    _refuse_unless(member, MemberStatus.TEST, action=_("Extending a test access"))
    _test_access_until_check(until)
    access = (
        TestAccess.objects.select_for_update()
        .select_related("profile")
        .filter(member=member)
        .first()
    )
    new_profile = profile or (access.profile if access else _test_access_profile(None))
    changes = audit_changes(
        {
            "test_access_until": member.test_access_until,
            "profile": access.profile.name if access else None,
        },
        {"test_access_until": until, "profile": new_profile.name},
    )
    if not changes:
        return member
    member.test_access_until = until
    member.save(update_fields=["test_access_until"])
    TestAccess.objects.update_or_create(
        member=member,
        defaults={
            "profile": new_profile,
            "granted_at": access.granted_at if access else timezone.now(),
        },
    )
    audit_record(
        actor=actor,
        action="member.test_access_extend",
        obj=member,
        changes=changes,
        member=member,
    )
    network_changed_on_commit(cause=f"member.test_access_extend {member.pk}", actor=actor)
    return member


@transaction.atomic
def member_test_access_end(*, member: Member, actor: User | None, note: str = "") -> Member:
    """End a test access without check-in: back to pending, the public IPv4 into quarantine
    (its port forwards are disabled with it); the devices stay registered."""
    member = _lock(member)
    _refuse_unless(member, MemberStatus.TEST, action=_("Ending a test access"))
    public_ipv4_release(member=member, actor=actor)
    TestAccess.objects.filter(member=member).delete()
    _set_status(
        member,
        MemberStatus.PENDING,
        actor=actor,
        note=note,
        extra={"test_access_until": None},
    )
    network_changed_on_commit(cause=f"member.test_access_end {member.pk}", actor=actor)
    return member


def expired_test_accesses_end(*, today: dt.date | None = None) -> list[int]:
    """End every test access whose last day lies before `today` (each in its own transaction,
    through member_test_access_end: audited, hooked). Returns the member ids."""
    today = today or timezone.localdate()
    ended = []
    for pk in Member.objects.filter(
        status=MemberStatus.TEST, test_access_until__lt=today
    ).values_list("pk", flat=True):
        try:
            member_test_access_end(member=Member(pk=pk), actor=None, note=_("Test access expired"))
        except MemberStateError:
            continue  # checked in or ended meanwhile
        ended.append(pk)
    return ended


def expiring_test_accesses_notify(*, today: dt.date | None = None) -> list[int]:
    """Tell each test-access member once, N days (admin setting) before the last day: a
    notice on their page and, as they chose, a mail in their language (apps.notifications).

    The row remembers the end date it was noticed for, so running again tells nobody twice,
    and an extension makes a new notice due. Returns the member ids.
    """
    from apps.network.models import NetworkSettings
    from apps.notifications.choices import NoticeKind
    from apps.notifications.services import notice_create

    today = today or timezone.localdate()
    days = NetworkSettings.load().test_access_notice_days
    sent = []
    with transaction.atomic():
        accesses = (
            TestAccess.objects.select_for_update(of=("self",), skip_locked=True)
            .select_related("member__user")
            .filter(
                member__status=MemberStatus.TEST,
                member__test_access_until__gte=today,
                member__test_access_until__lte=today + dt.timedelta(days=days),
            )
            .order_by("member_id")
        )
        for access in accesses:
            until = access.member.test_access_until
            if access.notice_sent_for == until:
                continue
            access.notice_sent_for = until
            access.save(update_fields=["notice_sent_for"])
            audit_record(
                actor=None,
                action="member.test_access_notice",
                obj=access.member,
                changes={"notice_sent_for": [None, until.isoformat()]},
                member=access.member,
            )
            notice_create(
                member=access.member,
                kind=NoticeKind.TEST_ACCESS,
                params={"until": until.isoformat()},
                source=f"test_access:{until.isoformat()}",
            )
            sent.append(access.member_id)
    return sent


@transaction.atomic
def member_suspend(*, member: Member, reason: str, actor: User) -> Member:
    """Suspend an active membership (addresses stay reserved; the firewall cuts it off)."""
    member = _lock(member)
    _refuse_unless(member, MemberStatus.ACTIVE, MemberStatus.TEST, action=_("Suspending"))
    if not reason.strip():
        raise MemberStateError(_("Say why the membership is suspended."), field="reason")
    _set_status(member, MemberStatus.SUSPENDED, actor=actor, note=reason.strip())
    network_changed_on_commit(cause=f"member.suspend {member.pk}", actor=actor)
    return member


@transaction.atomic
def member_move(*, member: Member, room: Room, actor: User) -> Member:
    """Move to another room: new private addresses for the devices, the same public IPv4."""
    member = _lock(member)
    if member.is_ended:
        raise MemberStateError(_("An ended membership cannot move."), field="room")
    if member.room_id == room.pk:
        raise MemberStateError(
            _("%(member)s already lives in %(room)s.") % {"member": member, "room": room.label},
            field="room",
        )
    room = Room.objects.select_related("building").get(pk=room.pk)
    room_require_subnet(room=room)
    now = timezone.now()
    old_room = member.room
    devices_readdress(member=member, room=room, actor=actor)
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
    network_changed_on_commit(cause=f"member.move {member.pk}", actor=actor)
    return member


def _close_stay(member: Member, now: dt.datetime) -> None:
    stay = RoomStay.objects.filter(member=member, period__upper_inf=True).first()
    if stay is not None:
        stay.period = DateTimeTZRange(stay.period.lower, now)
        stay.save(update_fields=["period"])


@transaction.atomic
def member_end(*, member: Member, actor: User, note: str = "") -> Member:
    """End a membership: public IPv4 to quarantine, devices removed, room given up."""
    member = _lock(member)
    if member.is_ended:
        raise MemberStateError(_("This membership has already ended."))
    now = timezone.now()
    # Port forwards are disabled and detached before the address goes into quarantine (they
    # stay as history without a device); the devices' IPv6 openings go with the devices.
    port_forwards_release(member=member, actor=actor)
    public_ipv4_release(member=member, actor=actor)
    for device in Device.objects.filter(member=member).select_related("member").order_by("id"):
        _device_delete(device=device, actor=actor, action="device.remove")
    TestAccess.objects.filter(member=member).delete()
    _close_stay(member, now)
    _set_status(
        member,
        MemberStatus.ENDED,
        actor=actor,
        note=note,
        extra={"ended_at": now, "room": None, "test_access_until": None},
    )
    network_changed_on_commit(cause=f"member.end {member.pk}", actor=actor)
    return member


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
        ipv6_prefix=room_ipv6_prefix_next(building=building),
    )
    audit_record(
        actor=actor,
        action="room.create",
        obj=room,
        changes=audit_changes({}, {"label": room.label, "ipv6_prefix": room.ipv6_prefix}),
    )
    return room
