"""Reading the audit trail."""

from __future__ import annotations

from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import QuerySet

from apps.audit.models import AuditEntry


def audit_for_member(*, member: models.Model) -> QuerySet[AuditEntry]:
    """Every entry about a member: the membership, their devices and addresses."""
    return AuditEntry.objects.filter(member=member).select_related("content_type", "actor")


def audit_for_object(*, obj: models.Model) -> QuerySet[AuditEntry]:
    """Entries about one object (buildings, rooms, subnets, pools)."""
    return AuditEntry.objects.filter(
        content_type=ContentType.objects.get_for_model(obj), object_id=str(obj.pk)
    ).select_related("content_type", "actor")
