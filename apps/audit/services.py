"""Writing the audit trail (services call this inside their transaction)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.contrib.contenttypes.models import ContentType
from django.db import models

from apps.audit.models import AuditEntry

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def audit_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, list[Any]]:
    """{field: [old, new]} for every field whose value differs (missing counts as None)."""
    return {
        key: [_plain(old.get(key)), _plain(new.get(key))]
        for key in sorted(set(old) | set(new))
        if _plain(old.get(key)) != _plain(new.get(key))
    }


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def audit_record(
    *,
    actor: User | None,
    action: str,
    obj: models.Model,
    changes: Mapping[str, list[Any]] | None = None,
    member: Any = None,
) -> AuditEntry:
    """Record that `actor` did `action` to `obj` (old and new values in `changes`)."""
    is_user = getattr(actor, "is_authenticated", False)
    return AuditEntry.objects.create(
        actor=actor if is_user else None,
        actor_name=actor.get_username() if is_user else "system",
        action=action,
        content_type=ContentType.objects.get_for_model(obj, for_concrete_model=True),
        object_id=str(obj.pk),
        object_repr=str(obj)[:200],
        member=member,
        changes=dict(changes or {}),
    )
