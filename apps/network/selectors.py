"""Reads of the network app: a member's forwards and openings, the policy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db.models import Count, QuerySet

from apps.members.models import Member
from apps.network.models import (
    BlockedPort,
    Device,
    Ipv6Opening,
    PortForward,
    ShapingProfile,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def member_port_forwards(*, actor: User, member: Member) -> QuerySet[PortForward]:
    """The member's forwards the actor may see, by device then port (one query)."""
    return (
        PortForward.objects.visible_to(actor)
        .filter(member=member)
        .select_related("device", "public_address")
        .order_by("device__name", "public_first", "protocol", "pk")
    )


def member_ipv6_openings(*, actor: User, member: Member) -> QuerySet[Ipv6Opening]:
    """The openings of the member's devices the actor may see, by device then port."""
    return (
        Ipv6Opening.objects.visible_to(actor)
        .filter(device__member=member)
        .select_related("device")
        .order_by("device__name", "port_first", "protocol", "pk")
    )


def member_devices(*, actor: User, member: Member) -> QuerySet[Device]:
    """The member's devices the actor may see (one query, however many there are), each with
    how many port forwards and IPv6 openings it has (they go with it when it is removed)."""
    return (
        Device.objects.visible_to(actor)
        .filter(member=member)
        .annotate(
            forward_count=Count("port_forwards", distinct=True),
            opening_count=Count("ipv6_openings", distinct=True),
        )
        .order_by("name", "pk")
    )


def by_device(rows: list[Any], devices: list[Device]) -> list[tuple[Device | None, list[Any]]]:
    """Rows grouped under their device, in the devices' order (rows without one at the end)."""
    groups: dict[int | None, list[Any]] = {}
    for row in rows:
        groups.setdefault(row.device_id, []).append(row)
    result: list[tuple[Device | None, list[Any]]] = [
        (device, groups.pop(device.pk)) for device in devices if device.pk in groups
    ]
    result += [(None, rest) for rest in groups.values()]
    return result


def shaping_profiles() -> QuerySet[ShapingProfile]:
    """Profiles, the default first."""
    return ShapingProfile.objects.order_by("-is_default", "down_kbit", "name")


def blocked_inbound() -> QuerySet[BlockedPort]:
    """The inbound ranges the policy blocks (shown next to the forward form)."""
    return BlockedPort.objects.filter(direction="inbound").order_by("first", "protocol")
