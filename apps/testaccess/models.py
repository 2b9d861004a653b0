"""A member's test access: the shaping profile and the expiry notice beside the member's
status `test` and `Member.test_access_until`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import models
from django.utils.translation import gettext_lazy as _

from apps.accounts.roles import STAFF_ROLES, has_role
from apps.network.models import ShapingProfile

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class TestAccessQuerySet(models.QuerySet["TestAccess"]):
    __test__ = False  # not a pytest class

    def visible_to(self, actor: User) -> TestAccessQuerySet:
        """Staff see every test access; a member only their own."""
        if has_role(actor, *STAFF_ROLES):
            return self
        if not getattr(actor, "is_authenticated", False):
            return self.none()
        return self.filter(member__user=actor)


class TestAccess(models.Model):
    """The shaping of a member's test access. The state itself is the member's: status `test`
    and `Member.test_access_until` (the last day); this row adds the profile and the notice."""

    __test__ = False  # not a pytest class

    member = models.OneToOneField(
        "members.Member", on_delete=models.CASCADE, primary_key=True, related_name="test_access"
    )
    profile = models.ForeignKey(
        ShapingProfile,
        on_delete=models.PROTECT,
        related_name="test_accesses",
        verbose_name=_("shaping profile"),
    )
    granted_at = models.DateTimeField(_("granted"))
    # The end date the expiry notice was mailed for: extending the access makes a new one due.
    notice_sent_for = models.DateField(null=True, blank=True)

    objects = TestAccessQuerySet.as_manager()

    class Meta:
        verbose_name = _("test access")
        verbose_name_plural = _("test accesses")
        # Created by the network app before test accesses had their own; the rows stayed.
        db_table = "network_testaccess"

    def __str__(self) -> str:
        return f"{self.member_id}: {self.profile.name}"
