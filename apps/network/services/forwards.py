"""Port forwards on a member's public IPv4 and IPv6 openings per device: the database
constraints decide conflicts, each refusal names the rule in the way."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.audit.services import audit_changes, audit_record
from apps.network.choices import Direction, Protocol
from apps.network.errors import (
    DeviceNotUsable,
    Ipv6OpeningConflict,
    LimitReached,
    MemberStateError,
    PortForwardConflict,
    PortRangeInvalid,
)
from apps.network.hooks import network_changed_on_commit
from apps.network.models import (
    BlockedPort,
    Device,
    Ipv6Opening,
    NetworkSettings,
    PortForward,
    PublicAddress,
)
from apps.network.ports import PortRange
from apps.network.services.helpers import _constraint, _lock_member, _network_row_recorded
from apps.network.signals import public_ipv4_quarantined

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from apps.members.models import Member

FORWARD_USABLE_STATUSES = ("active", "test")  # MemberStatus.ACTIVE, MemberStatus.TEST


def member_can_forward(member: Member) -> bool:
    """Forwards and openings need a membership that reaches the Internet (active or test)."""
    return member.status in FORWARD_USABLE_STATUSES


def _require_usable(member: Member) -> None:
    if not member_can_forward(member):
        raise DeviceNotUsable(
            _(
                "Port forwards and IPv6 openings need an active membership or a test access; "
                "this membership is “%(status)s”."
            )
            % {"status": member.get_status_display()}
        )


def _own_device(member: Member, device: Device | None) -> Device:
    """The device, refreshed, if it is the member's (DeviceNotUsable otherwise)."""
    found = (
        Device.objects.filter(pk=device.pk, member=member).first() if device is not None else None
    )
    if found is None:
        raise DeviceNotUsable(_("Choose one of this member's own devices."))
    return found


def _protocol_check(protocol: str) -> str:
    if protocol not in Protocol.values:
        raise PortRangeInvalid(
            _("Choose TCP, UDP or both."),
            field="protocol",
        )
    return protocol


def _protocols_that_overlap(protocol: str) -> list[str]:
    return list(Protocol.values) if protocol == Protocol.BOTH else [protocol, Protocol.BOTH]


def _blocked_inbound_check(protocol: str, ports: PortRange, field: str) -> None:
    """Refuse ports the policy blocks inbound (PortRangeInvalid naming the blocked range)."""
    blocked = (
        BlockedPort.objects.filter(
            direction=Direction.INBOUND,
            protocol__in=_protocols_that_overlap(protocol),
            first__lte=ports.last,
            last__gte=ports.first,
        )
        .order_by("first")
        .first()
    )
    if blocked is not None:
        raise PortRangeInvalid(
            _(
                "%(protocol)s port %(ports)s is blocked for inbound traffic by the network "
                "policy (%(why)s); choose other ports."
            )
            % {
                "protocol": blocked.get_protocol_display(),
                "ports": blocked.ports,
                "why": blocked.note or _("no reason given"),
            },
            field=field,
        )


def _forward_values(forward: PortForward) -> dict[str, Any]:
    return {
        "protocol": forward.protocol,
        "public_ports": forward.public_ports,
        "target_ports": forward.target_ports,
        "device": forward.device.name if forward.device_id and forward.device else None,
        "public_address": str(forward.public_address) if forward.public_address_id else None,
        "enabled": forward.enabled,
        "description": forward.description,
    }


def _forward_label(other: PortForward) -> str:
    return _("%(protocol)s %(ports)s → %(device)s port %(target)s") % {
        "protocol": other.get_protocol_display(),
        "ports": other.public_ports,
        "device": other.device.name if other.device else "—",
        "target": other.target_ports,
    }


def forward_conflict_message(others: list[PortForward]) -> str:
    """Names every conflicting forward by its ports and device (all the member's own)."""
    if len(others) == 1:
        return _(
            "These ports overlap the forward %(forward)s; choose other ports or change that "
            "forward."
        ) % {"forward": _forward_label(others[0])}
    return _(
        "These ports overlap %(count)d forwards: %(forwards)s; choose other ports or change "
        "those forwards."
    ) % {"count": len(others), "forwards": "; ".join(_forward_label(o) for o in others)}


def _overlapping_forwards(forward: PortForward) -> list[PortForward]:
    return list(
        PortForward.objects.filter(
            public_address_id=forward.public_address_id,
            protocol__in=_protocols_that_overlap(forward.protocol),
            public_first__lte=forward.public_last,
            public_last__gte=forward.public_first,
        )
        .exclude(pk=forward.pk)
        .select_related("device")
        .order_by("public_first")
    )


def _save_forward(forward: PortForward, *, update_fields: list[str] | None = None) -> None:
    """Save in a savepoint; the exclusion constraint's refusal names the forward in the way."""
    try:
        with transaction.atomic():
            if update_fields is None:
                forward.save(force_insert=True)
            else:
                forward.save(update_fields=[*update_fields, "updated_at"])
    except IntegrityError as exc:
        if _constraint(exc) != "portforward_no_overlap":
            raise
        others = _overlapping_forwards(forward)
        if forward.pk is not None and update_fields is None:
            forward.pk = None
        raise PortForwardConflict(
            forward_conflict_message(others)
            if others
            else _("These ports overlap another forward at the same moment; please try again.")
        ) from None


def _target_for(public: PortRange, target: PortRange | None) -> PortRange:
    target = target or public
    if target.size != public.size:
        raise PortRangeInvalid(
            _(
                "The device ports (%(target)s, %(tsize)d ports) must be as many as the public "
                "ports (%(public)s, %(psize)d ports)."
            )
            % {"target": target, "tsize": target.size, "public": public, "psize": public.size},
            field="target_ports",
        )
    return target


def _member_public_address(member: Member) -> PublicAddress:
    address = PublicAddress.objects.filter(member=member).first()
    if address is None:
        raise MemberStateError(
            _("This membership has no public IPv4 address yet (it is assigned at check-in).")
        )
    return address


@transaction.atomic
def port_forward_create(
    *,
    member: Member,
    device: Device,
    protocol: str,
    public_ports: PortRange,
    actor: User,
    target_ports: PortRange | None = None,
    description: str = "",
    enabled: bool = True,
) -> PortForward:
    """Forward public ports of the member's IPv4 to one of their devices.

    The member row is locked (the per-member limit); the exclusion constraint decides overlaps.
    """
    member = _lock_member(member)
    _require_usable(member)
    device = _own_device(member, device)
    protocol = _protocol_check(protocol)
    target = _target_for(public_ports, target_ports)
    _blocked_inbound_check(protocol, public_ports, "public_ports")
    limit = NetworkSettings.load().port_forward_limit
    if PortForward.objects.filter(member=member).count() >= limit:
        raise LimitReached(
            _("A member can have at most %(limit)d port forwards; remove one first.")
            % {"limit": limit},
            field="public_ports",
        )
    forward = PortForward(
        member=member,
        public_address=_member_public_address(member),
        device=device,
        protocol=protocol,
        public_first=public_ports.first,
        public_last=public_ports.last,
        target_first=target.first,
        target_last=target.last,
        enabled=enabled,
        description=description.strip()[:100],
    )
    _save_forward(forward)
    _network_row_recorded(
        actor=actor,
        action="port_forward.create",
        obj=forward,
        before={},
        after=_forward_values(forward),
        member=member,
    )
    return forward


@transaction.atomic
def port_forward_change(
    *,
    forward: PortForward,
    actor: User,
    device: Device | None = None,
    protocol: str | None = None,
    public_ports: PortRange | None = None,
    target_ports: PortRange | None = None,
    description: str | None = None,
    enabled: bool | None = None,
) -> PortForward:
    """Change, enable or disable a forward; an enabled result needs a usable membership."""
    member = _lock_member(forward.member)
    forward = (
        PortForward.objects.select_for_update(of=("self",))
        .select_related("device", "public_address")
        .get(pk=forward.pk)
    )
    before = _forward_values(forward)
    fields: set[str] = set()
    if device is not None and device.pk != forward.device_id:
        forward.device = _own_device(member, device)
        fields.add("device")
    if protocol is not None and protocol != forward.protocol:
        forward.protocol = _protocol_check(protocol)
        fields.add("protocol")
    old_public = PortRange(forward.public_first, forward.public_last)
    old_target = PortRange(forward.target_first, forward.target_last)
    public = public_ports or old_public
    if target_ports is None and public != old_public:
        target_ports = public if old_target == old_public else old_target
    target = _target_for(public, target_ports or old_target)
    if (public, target) != (old_public, old_target):
        forward.public_first, forward.public_last = public.first, public.last
        forward.target_first, forward.target_last = target.first, target.last
        fields |= {"public_first", "public_last", "target_first", "target_last"}
    if description is not None and description.strip()[:100] != forward.description:
        forward.description = description.strip()[:100]
        fields.add("description")
    if enabled is not None and enabled != forward.enabled:
        forward.enabled = enabled
        fields.add("enabled")
    if not fields:
        return forward
    if forward.enabled:
        _require_usable(member)
        if forward.device is None:
            raise DeviceNotUsable(_("Choose the device this forward goes to."))
        _own_device(member, forward.device)
        if forward.public_address_id is None:
            forward.public_address = _member_public_address(member)
            fields.add("public_address")
        if fields & {"protocol", "public_first", "enabled"}:
            _blocked_inbound_check(forward.protocol, public, "public_ports")
    _save_forward(forward, update_fields=sorted(fields))
    action = "port_forward.change"
    if fields == {"enabled"}:
        action = "port_forward.enable" if forward.enabled else "port_forward.disable"
    _network_row_recorded(
        actor=actor,
        action=action,
        obj=forward,
        before=before,
        after=_forward_values(forward),
        member=member,
    )
    return forward


def _forward_delete(*, forward: PortForward, actor: User) -> None:
    audit_record(
        actor=actor,
        action="port_forward.delete",
        obj=forward,
        changes=audit_changes(_forward_values(forward), {}),
        member=forward.member,
    )
    forward.delete()


@transaction.atomic
def port_forward_delete(*, forward: PortForward, actor: User) -> None:
    """Remove a forward."""
    _lock_member(forward.member)
    forward = PortForward.objects.select_related("device", "member", "public_address").get(
        pk=forward.pk
    )
    pk = forward.pk
    _forward_delete(forward=forward, actor=actor)
    network_changed_on_commit(cause=f"port_forward.delete {pk}", actor=actor)


def port_forwards_release(*, member: Member, actor: User | None) -> int:
    """Disable the member's forwards and detach them from their public IPv4 (which goes back to
    the pool), so they never reserve ports of the address's next holder. Inside the caller's
    transaction; the caller schedules the hook."""
    count = 0
    for forward in (
        PortForward.objects.select_for_update(of=("self",))
        .select_related("device", "public_address")
        .filter(member=member, public_address__isnull=False)
        .order_by("id")
    ):
        before = _forward_values(forward)
        forward.enabled, forward.public_address = False, None
        forward.save(update_fields=["enabled", "public_address", "updated_at"])
        audit_record(
            actor=actor,
            action="port_forward.release",
            obj=forward,
            changes=audit_changes(before, _forward_values(forward)),
            member=member,
        )
        count += 1
    return count


def _opening_values(opening: Ipv6Opening) -> dict[str, Any]:
    return {
        "device": opening.device.name,
        "protocol": opening.protocol,
        "ports": opening.ports or "all",
        "enabled": opening.enabled,
        "description": opening.description,
    }


def opening_conflict_message(other: Ipv6Opening) -> str:
    """Names the opening in the way (same device, overlapping ports)."""
    return _(
        "These ports overlap the opening %(protocol)s %(ports)s of %(device)s; change that "
        "opening instead."
    ) % {
        "protocol": other.get_protocol_display(),
        "ports": other.ports or _("all ports"),
        "device": other.device.name,
    }


def _save_opening(opening: Ipv6Opening, *, update_fields: list[str] | None = None) -> None:
    try:
        with transaction.atomic():
            if update_fields is None:
                opening.save(force_insert=True)
            else:
                opening.save(update_fields=[*update_fields, "updated_at"])
    except IntegrityError as exc:
        if _constraint(exc) != "ipv6opening_no_overlap":
            raise
        first, last = opening.port_first or 1, opening.port_last or 65535
        other = (
            Ipv6Opening.objects.filter(
                device_id=opening.device_id,
                protocol__in=_protocols_that_overlap(opening.protocol),
            )
            .exclude(pk=opening.pk)
            .select_related("device")
            .order_by("port_first")
        )
        found = next(
            (o for o in other if (o.port_first or 1) <= last and first <= (o.port_last or 65535)),
            None,
        )
        if update_fields is None:
            opening.pk = None
        raise Ipv6OpeningConflict(
            opening_conflict_message(found)
            if found
            else _("These ports overlap another opening; please try again.")
        ) from None


def _opening_ports(protocol: str, ports: PortRange | None) -> tuple[int | None, int | None]:
    if ports is None:
        if protocol != Protocol.BOTH:
            raise PortRangeInvalid(
                _("“All ports” always opens TCP and UDP; choose both or give ports."),
                field="protocol",
            )
        return None, None
    _blocked_inbound_check(protocol, ports, "ports")
    return ports.first, ports.last


@transaction.atomic
def ipv6_opening_create(
    *,
    device: Device,
    protocol: str,
    ports: PortRange | None,
    actor: User,
    description: str = "",
    enabled: bool = True,
) -> Ipv6Opening:
    """Open inbound IPv6 to a device: a port range, or all ports (`ports=None`, protocol both)."""
    member = _lock_member(device.member)
    _require_usable(member)
    device = _own_device(member, device)
    if not device.ipv6:
        raise DeviceNotUsable(_("This device has no IPv6 address, so nothing can be opened."))
    protocol = _protocol_check(protocol)
    first, last = _opening_ports(protocol, ports)
    limit = NetworkSettings.load().ipv6_opening_limit
    if Ipv6Opening.objects.filter(device__member=member).count() >= limit:
        raise LimitReached(
            _("A member can have at most %(limit)d IPv6 openings; remove one first.")
            % {"limit": limit},
            field="ports",
        )
    opening = Ipv6Opening(
        device=device,
        protocol=protocol,
        port_first=first,
        port_last=last,
        enabled=enabled,
        description=description.strip()[:100],
    )
    _save_opening(opening)
    _network_row_recorded(
        actor=actor,
        action="ipv6_opening.create",
        obj=opening,
        before={},
        after=_opening_values(opening),
        member=member,
    )
    return opening


_UNSET: Any = object()


@transaction.atomic
def ipv6_opening_change(
    *,
    opening: Ipv6Opening,
    actor: User,
    protocol: str | None = None,
    ports: PortRange | None = _UNSET,
    description: str | None = None,
    enabled: bool | None = None,
) -> Ipv6Opening:
    """Change, enable or disable an opening (`ports=None` means all ports)."""
    member = _lock_member(opening.device.member)
    opening = (
        Ipv6Opening.objects.select_for_update(of=("self",))
        .select_related("device")
        .get(pk=opening.pk)
    )
    before = _opening_values(opening)
    fields: set[str] = set()
    new_protocol = _protocol_check(protocol) if protocol is not None else opening.protocol
    if ports is _UNSET:
        ports = (
            None
            if opening.port_first is None
            else PortRange(opening.port_first, opening.port_last or opening.port_first)
        )
    first, last = _opening_ports(new_protocol, ports) if ports is not None else (None, None)
    if ports is None and new_protocol != Protocol.BOTH:
        _opening_ports(new_protocol, None)
    for name, value in (("protocol", new_protocol), ("port_first", first), ("port_last", last)):
        if getattr(opening, name) != value:
            setattr(opening, name, value)
            fields.add(name)
    if description is not None and description.strip()[:100] != opening.description:
        opening.description = description.strip()[:100]
        fields.add("description")
    if enabled is not None and enabled != opening.enabled:
        opening.enabled = enabled
        fields.add("enabled")
    if not fields:
        return opening
    if opening.enabled:
        _require_usable(member)
    _save_opening(opening, update_fields=sorted(fields))
    action = "ipv6_opening.change"
    if fields == {"enabled"}:
        action = "ipv6_opening.enable" if opening.enabled else "ipv6_opening.disable"
    _network_row_recorded(
        actor=actor,
        action=action,
        obj=opening,
        before=before,
        after=_opening_values(opening),
        member=member,
    )
    return opening


def _opening_delete(*, opening: Ipv6Opening, actor: User, member: Member) -> None:
    audit_record(
        actor=actor,
        action="ipv6_opening.delete",
        obj=opening,
        changes=audit_changes(_opening_values(opening), {}),
        member=member,
    )
    opening.delete()


@transaction.atomic
def ipv6_opening_delete(*, opening: Ipv6Opening, actor: User) -> None:
    """Close an opening."""
    member = _lock_member(opening.device.member)
    opening = Ipv6Opening.objects.select_related("device").get(pk=opening.pk)
    pk = opening.pk
    _opening_delete(opening=opening, actor=actor, member=member)
    network_changed_on_commit(cause=f"ipv6_opening.delete {pk}", actor=actor)


# --- the member's public IPv4, released with its forwards ------------------------------------


def public_ipv4_release(*, member: Member, actor: User | None) -> PublicAddress | None:
    """Take the member's public IPv4 back into quarantine (admin setting, default 30 days)."""
    address = PublicAddress.objects.select_for_update().filter(member=member).first()
    if address is None:
        return None
    port_forwards_release(member=member, actor=actor)
    days = NetworkSettings.load().quarantine_days
    now = timezone.now()
    until = now + dt.timedelta(days=days)
    address.member, address.quarantined_until, address.assigned_at = None, until, None
    address.save(update_fields=["member", "quarantined_until", "assigned_at"])
    public_ipv4_quarantined.send(
        sender=PublicAddress, address=address.address, member=member, at=now, until=until
    )
    audit_record(
        actor=actor,
        action="public_ipv4.quarantine",
        obj=address,
        changes={"member": [str(member), None], "quarantined_until": [None, until.isoformat()]},
        member=member,
    )
    return address
