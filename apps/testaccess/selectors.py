"""Reads about test accesses: the one of a member, and those ending soon."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from django.db.models import QuerySet
from django.utils import timezone

from apps.members.choices import MemberStatus
from apps.members.models import Member
from apps.testaccess.models import TestAccess

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def expiring_test_accesses(
    *, actor: User, within_days: int = 7, today: dt.date | None = None
) -> QuerySet[Member]:
    """Test-access members whose last day is today or in the next `within_days` days (and any
    already overdue the beat task has not ended yet), soonest first."""
    today = today or timezone.localdate()
    return (
        Member.objects.visible_to(actor)
        .filter(status=MemberStatus.TEST, test_access_until__lte=today + dt.timedelta(within_days))
        .select_related("user", "room__building", "test_access__profile")
        .order_by("test_access_until", "user__last_name", "pk")
    )


def member_test_access(*, member: Member) -> TestAccess | None:
    """The shaping row of the member's test access, if any."""
    return TestAccess.objects.select_related("profile").filter(member=member).first()
