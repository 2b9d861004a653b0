"""Policy and shaping profiles, edited by admins: blocked ports, management networks,
shaping; audited, hooked when they shape the rule set."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import transaction

from apps.audit.services import audit_changes, audit_record
from apps.network.hooks import network_changed_on_commit
from apps.network.models import BlockedPort, ManagementNetwork, NetworkSettings, ShapingProfile
from apps.network.ports import PortRange, port_text

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _model_values(obj: Any, fields: list[str]) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in fields}


@transaction.atomic
def policy_object_save(*, obj: Any, actor: User, fields: list[str]) -> Any:
    """Create or change a policy row (blocked port range, management network, shaping profile,
    network settings): audited; the firewalls are recompiled when it shapes the rule set."""
    model = type(obj)
    before: dict[str, Any] = {}
    if obj.pk is not None and model.objects.filter(pk=obj.pk).exists():
        before = _model_values(model.objects.get(pk=obj.pk), fields)
        created = False
    else:
        created = True
    if isinstance(obj, BlockedPort):
        PortRange(obj.first, obj.last)  # refuses nonsense before the constraint does
    if isinstance(obj, ShapingProfile) and obj.is_default:
        ShapingProfile.objects.filter(is_default=True).exclude(pk=obj.pk).update(is_default=False)
    obj.save()
    name = model._meta.model_name
    audit_record(
        actor=actor,
        action=f"{name}.{'create' if created else 'change'}",
        obj=obj,
        changes=audit_changes(before, _model_values(obj, fields)),
    )
    if _policy_shapes_rules(obj):
        network_changed_on_commit(cause=f"{name}.save {obj.pk}", actor=actor)
    return obj


@transaction.atomic
def policy_object_delete(*, obj: Any, actor: User, fields: list[str]) -> None:
    """Delete a policy row (audited; recompiles when it shaped the rule set)."""
    name = type(obj)._meta.model_name
    shapes = _policy_shapes_rules(obj)
    audit_record(
        actor=actor,
        action=f"{name}.delete",
        obj=obj,
        changes=audit_changes(_model_values(obj, fields), {}),
    )
    pk = obj.pk
    obj.delete()
    if shapes:
        network_changed_on_commit(cause=f"{name}.delete {pk}", actor=actor)


def _policy_shapes_rules(obj: Any) -> bool:
    if isinstance(obj, BlockedPort | ManagementNetwork | NetworkSettings):
        return True  # (network settings: the conntrack quotas)
    if obj._meta.app_label == "dhcp":  # DHCP settings and registration ranges: Kea and nft
        return True
    if isinstance(obj, ShapingProfile):
        return obj.pk is not None and obj.test_accesses.exists()
    return False


def blocked_port_text(first: int, last: int) -> str:
    """8080 or 8000-8010."""
    return port_text(first, last)
