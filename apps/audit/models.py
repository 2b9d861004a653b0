"""The audit trail: one row per change, written explicitly by the services."""

from __future__ import annotations

from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.utils.translation import gettext_lazy as _


class AuditEntry(models.Model):
    """Who changed what, when, with the old and new values of each changed field."""

    at = models.DateTimeField(_("when"), auto_now_add=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("who"),
    )
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(_("action"), max_length=60)
    content_type = models.ForeignKey(ContentType, on_delete=models.PROTECT, related_name="+")
    object_id = models.CharField(max_length=40)
    object_repr = models.CharField(_("object"), max_length=200)
    # The member the change concerns (devices, addresses, the membership itself), so that the
    # member's page shows everything, including devices that no longer exist.
    member = models.ForeignKey(
        "members.Member",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="audit_entries",
        db_constraint=False,
    )
    changes = models.JSONField(_("changes"), default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name = _("audit entry")
        verbose_name_plural = _("audit entries")
        indexes = [
            models.Index(fields=["content_type", "object_id", "-at"], name="audit_object_at"),
            models.Index(fields=["member", "-at"], name="audit_member_at"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_name} {self.action} {self.object_repr}"
