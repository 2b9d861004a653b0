"""Writes to test accesses: grant, extend, end, and the beat task's notices and expiry.

A test access is a membership state (status `test` until `Member.test_access_until`, its last
day) with a shaping profile; each write is one transaction with audit rows and schedules the
`network_changed` hook for after the commit.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _

from apps.audit.services import audit_changes, audit_record
from apps.members.choices import MemberStatus
from apps.members.models import Member
from apps.members.services import member_lock, member_status_require, member_status_set
from apps.network.errors import MemberStateError
from apps.network.hooks import network_changed_on_commit
from apps.network.models import NetworkSettings, ShapingProfile
from apps.network.services import public_ipv4_allocate, public_ipv4_release, room_require_subnet
from apps.notifications.choices import NoticeKind
from apps.notifications.services import notice_create
from apps.testaccess.models import TestAccess

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _test_access_profile(profile: ShapingProfile | None) -> ShapingProfile:
    return profile if profile is not None else ShapingProfile.default()


def _test_access_until_check(until: dt.date) -> None:
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
    member = member_lock(member)
    member_status_require(
        member, MemberStatus.PENDING, MemberStatus.TEST, action=_("A test access")
    )
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
    member_status_set(member, MemberStatus.TEST, actor=actor, extra={"test_access_until": until})
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
    member = member_lock(member)
    member_status_require(member, MemberStatus.TEST, action=_("Extending a test access"))
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
    member = member_lock(member)
    member_status_require(member, MemberStatus.TEST, action=_("Ending a test access"))
    public_ipv4_release(member=member, actor=actor)
    TestAccess.objects.filter(member=member).delete()
    member_status_set(
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
