"""Buildings, rooms, members and their history."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import DateTimeRangeField, RangeOperators
from django.contrib.postgres.indexes import GistIndex
from django.db import models
from django.db.models.functions import Upper
from django.utils.translation import gettext_lazy as _

from apps.accounts.roles import STAFF_ROLES, has_role
from apps.core.fields import CidrField
from apps.members.choices import MemberStatus

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class Building(models.Model):
    """A house of the dormitory; its subnets live in the network app."""

    code = models.CharField(_("code"), max_length=16, unique=True, help_text=_("Short, e.g. A"))
    name = models.CharField(_("name"), max_length=100)
    address = models.CharField(_("street address"), max_length=200, blank=True)

    class Meta:
        ordering = ["code"]
        verbose_name = _("building")
        verbose_name_plural = _("buildings")

    def __str__(self) -> str:
        return f"{self.code} · {self.name}"


class RoomQuerySet(models.QuerySet["Room"]):
    def visible_to(self, actor: User) -> RoomQuerySet:
        """Staff see every room; a member sees only the room they live in."""
        if has_role(actor, *STAFF_ROLES):
            return self
        if not getattr(actor, "is_authenticated", False):
            return self.none()
        return self.filter(members__user=actor)


class Room(models.Model):
    """A room; its IPv6 /64 is taken from the building's prefix when the room is created."""

    building = models.ForeignKey(
        Building, on_delete=models.PROTECT, related_name="rooms", verbose_name=_("building")
    )
    number = models.CharField(_("number"), max_length=16)
    label = models.CharField(_("label"), max_length=40, unique=True, editable=False)
    ipv6_prefix = CidrField(_("IPv6 /64"), null=True, blank=True, unique=True, editable=False)

    objects = RoomQuerySet.as_manager()

    class Meta:
        ordering = ["building__code", "number"]
        verbose_name = _("room")
        verbose_name_plural = _("rooms")
        constraints = [
            models.UniqueConstraint(fields=["building", "number"], name="room_number_unique"),
        ]
        indexes = [
            models.Index(Upper("label"), name="room_label_upper"),
            models.Index(fields=["number"], name="room_number"),
            GistIndex(fields=["ipv6_prefix"], opclasses=["inet_ops"], name="room_ipv6_gist"),
        ]

    def __str__(self) -> str:
        return self.label

    @staticmethod
    def make_label(building_code: str, number: str) -> str:
        """How rooms are written at the desk: building code, dash, room number (A-101)."""
        return f"{building_code}-{number}"


class MemberQuerySet(models.QuerySet["Member"]):
    def visible_to(self, actor: User) -> MemberQuerySet:
        """Staff see every member; a member sees only themselves."""
        if has_role(actor, *STAFF_ROLES):
            return self
        if not getattr(actor, "is_authenticated", False):
            return self.none()
        return self.filter(user=actor)


class Member(models.Model):
    """A resident's membership: their login, room, contact data and status."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="member"
    )
    room = models.ForeignKey(
        Room,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="members",
        verbose_name=_("room"),
    )
    status = models.CharField(
        _("status"), max_length=16, choices=MemberStatus.choices, default=MemberStatus.PENDING
    )
    status_since = models.DateTimeField(_("status since"))
    phone = models.CharField(_("phone"), max_length=40, blank=True)
    registered_at = models.DateTimeField(_("registered"))
    checked_in_at = models.DateTimeField(_("checked in"), null=True, blank=True)
    test_access_until = models.DateField(_("test access until"), null=True, blank=True)
    ended_at = models.DateTimeField(_("ended"), null=True, blank=True)
    # When a former member's personal data was erased (apps/members/privacy.py); empty: not yet.
    erased_at = models.DateTimeField(_("personal data erased"), null=True, blank=True)

    objects = MemberQuerySet.as_manager()

    class Meta:
        ordering = ["user__last_name", "user__first_name"]
        verbose_name = _("member")
        verbose_name_plural = _("members")
        indexes = [models.Index(fields=["status", "registered_at"], name="member_status_reg")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status=MemberStatus.ENDED) | models.Q(room__isnull=False),
                name="member_room_unless_ended",
            ),
            models.CheckConstraint(
                condition=~models.Q(status=MemberStatus.TEST)
                | models.Q(test_access_until__isnull=False),
                name="member_test_access_has_end",
            ),
        ]

    def __str__(self) -> str:
        return self.user.get_full_name() or self.user.get_username()

    @property
    def is_ended(self) -> bool:
        return self.status == MemberStatus.ENDED


class StatusChange(models.Model):
    """One step in a membership's life: from, to, when, who and why."""

    member = models.ForeignKey(Member, on_delete=models.CASCADE, related_name="status_changes")
    old_status = models.CharField(max_length=16, choices=MemberStatus.choices, blank=True)
    new_status = models.CharField(max_length=16, choices=MemberStatus.choices)
    at = models.DateTimeField()
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["member", "-at"], name="statuschange_member_at")]

    def __str__(self) -> str:
        return f"{self.old_status or '-'} -> {self.new_status}"


class RoomStay(models.Model):
    """A member living in a room for a period; a member can never be in two rooms at once."""

    member = models.ForeignKey(Member, on_delete=models.CASCADE, related_name="room_stays")
    room = models.ForeignKey(Room, on_delete=models.PROTECT, related_name="stays")
    period = DateTimeRangeField()

    class Meta:
        ordering = ["-period"]
        constraints = [
            ExclusionConstraint(
                name="roomstay_no_overlap",
                expressions=[("member", RangeOperators.EQUAL), ("period", RangeOperators.OVERLAPS)],
            ),
        ]

    def __str__(self) -> str:
        return f"{self.room} {self.period}"
