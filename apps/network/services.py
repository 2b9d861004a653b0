"""Writes to network state: addresses and devices. One transaction each, audited, hooked."""

from __future__ import annotations

import datetime as dt
import ipaddress
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import formats, timezone
from django.utils.translation import gettext as _

from apps.abuse.services import (
    device_addresses_record,
    public_ipv4_assign_record,
    public_ipv4_quarantine_record,
)
from apps.audit.services import audit_changes, audit_record
from apps.network.choices import Direction, Protocol
from apps.network.errors import (
    DeviceLimitReached,
    DeviceNameInUse,
    DeviceNotUsable,
    Ipv6OpeningConflict,
    LimitReached,
    MacInUse,
    MemberStateError,
    NetworkError,
    NoSubnet,
    PoolExhausted,
    PortForwardConflict,
    PortRangeInvalid,
    QuarantineFull,
    SubnetExhausted,
)
from apps.network.hooks import network_changed_on_commit
from apps.network.mac import eui64_interface_id, mac_normalize, mac_validate_unicast
from apps.network.models import (
    BlockedPort,
    Device,
    Family,
    Ipv6Opening,
    ManagementNetwork,
    NetworkSettings,
    PortForward,
    PublicAddress,
    PublicPool,
    ShapingProfile,
    Subnet,
)
from apps.network.ports import PortRange, port_text

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from apps.members.models import Building, Member, Room


class InvalidMac(NetworkError):
    field = "mac"


# --- helpers (called inside a service's transaction) ------------------------------------------


def _constraint(exc: IntegrityError) -> str:
    """The name of the constraint an IntegrityError violated ('' when unknown)."""
    diag = getattr(exc.__cause__, "diag", None)
    return getattr(diag, "constraint_name", None) or ""


def mac_clean(mac: str) -> str:
    """Normalise a MAC in any common notation and refuse multicast/broadcast/zero (InvalidMac)."""
    try:
        value = mac_normalize(mac)
        mac_validate_unicast(value)
    except ValidationError as exc:
        raise InvalidMac(" ".join(exc.messages)) from None
    return value


def building_subnet(*, building: Building, family: int = Family.IPV4) -> Subnet | None:
    """The building's subnet of `family`, if it has one."""
    return Subnet.objects.filter(building=building, family=family).first()


def _ipv4_subnet_locked(building: Building) -> Subnet:
    subnet = (
        Subnet.objects.select_for_update().filter(building=building, family=Family.IPV4).first()
    )
    if subnet is None:
        raise NoSubnet(
            _(
                "Building %(building)s has no private IPv4 subnet yet, so its rooms cannot have "
                "devices. An admin adds one under Admin › Subnets."  # noqa: RUF001
            )
            % {"building": building.code}
        )
    return subnet


def _private_ipv4_allocate(*, building: Building, exclude: set[str] | None = None) -> str:
    """The lowest free private IPv4 of the building (network, gateway and broadcast excluded).

    The subnet row is locked, so allocators in one building queue up; UNIQUE(ipv4) is the
    backstop.
    """
    subnet = _ipv4_subnet_locked(building)
    network = ipaddress.IPv4Network(subnet.network)
    used = {
        int(ipaddress.IPv4Address(a))
        for a in Device.objects.filter(ipv4__net_contained_or_equal=subnet.network).values_list(
            "ipv4", flat=True
        )
    }
    used |= {int(ipaddress.IPv4Address(a)) for a in exclude or ()}
    first, last = int(network.network_address) + 2, int(network.broadcast_address) - 1
    for candidate in range(first, last + 1):
        if candidate not in used:
            return str(ipaddress.IPv4Address(candidate))
    raise SubnetExhausted(
        _("The private subnet %(net)s of building %(building)s has no free address left.")
        % {"net": subnet.network, "building": building.code}
    )


def device_ipv6(*, room: Room, mac: str) -> str | None:
    """The device's IPv6 address: the room's /64 with the MAC's EUI-64 interface identifier."""
    if not room.ipv6_prefix:
        return None
    prefix = ipaddress.IPv6Network(room.ipv6_prefix)
    return str(ipaddress.IPv6Address(int(prefix.network_address) | eui64_interface_id(mac)))


def room_ipv6_prefix_next(*, building: Building) -> str | None:
    """The lowest free /64 of the building's IPv6 prefix (index 0 stays with the building)."""
    subnet = (
        Subnet.objects.select_for_update().filter(building=building, family=Family.IPV6).first()
    )
    if subnet is None:
        return None
    from apps.members.models import Room

    prefix = ipaddress.IPv6Network(subnet.network)
    used = set(
        Room.objects.filter(building=building, ipv6_prefix__isnull=False).values_list(
            "ipv6_prefix", flat=True
        )
    )
    for index, net in enumerate(prefix.subnets(new_prefix=64)):
        if index == 0:
            continue
        if str(net) not in used:
            return str(net)
        if index > 65536:
            break
    raise SubnetExhausted(
        _("The IPv6 prefix %(net)s has no free /64 left.") % {"net": subnet.network}
    )


def public_ipv4_allocate(*, member: Member, actor: User) -> PublicAddress:
    """Give `member` the lowest free public IPv4 (refusing with PoolExhausted / QuarantineFull).

    Every active pool row is locked, so two volunteers checking in at the same moment queue up;
    UNIQUE(address) and UNIQUE(member) are the backstop.
    """
    existing = PublicAddress.objects.filter(member=member).first()
    if existing is not None:
        return existing
    pools = list(PublicPool.objects.select_for_update().filter(active=True).order_by("id"))
    if not pools:
        raise PoolExhausted(_("There is no active public IPv4 pool; an admin adds one."))
    now = timezone.now()
    soonest: dt.datetime | None = None
    for pool in pools:
        network = ipaddress.IPv4Network(pool.network)
        rows = {
            int(ipaddress.IPv4Address(address)): (address, holder, until)
            for address, holder, until in PublicAddress.objects.filter(pool=pool).values_list(
                "address", "member_id", "quarantined_until"
            )
        }
        if network.prefixlen >= 31:
            first, last = int(network.network_address), int(network.broadcast_address)
        else:
            first, last = int(network.network_address) + 1, int(network.broadcast_address) - 1
        for candidate in range(first, last + 1):
            row = rows.get(candidate)
            if row is None:
                address = PublicAddress.objects.create(
                    pool=pool,
                    address=str(ipaddress.IPv4Address(candidate)),
                    member=member,
                    assigned_at=now,
                )
                break
            _address, holder, until = row
            if holder is None and (until is None or until <= now):
                address = PublicAddress.objects.get(pool=pool, address=row[0])
                address.member, address.assigned_at, address.quarantined_until = member, now, None
                address.save(update_fields=["member", "assigned_at", "quarantined_until"])
                break
            if holder is None and until is not None and (soonest is None or until < soonest):
                soonest = until
        else:
            continue
        break
    else:
        if soonest is not None:
            raise QuarantineFull(
                _(
                    "Every free public IPv4 address is still in quarantine; the first one is "
                    "released on %(date)s. An admin can add a pool or shorten the quarantine."
                )
                % {"date": formats.date_format(timezone.localtime(soonest), "SHORT_DATE_FORMAT")}
            )
        raise PoolExhausted(
            _("All public IPv4 addresses are in use. An admin has to add a public pool first.")
        )
    public_ipv4_assign_record(address=address.address, member=member, at=now)
    audit_record(
        actor=actor,
        action="public_ipv4.assign",
        obj=address,
        changes={"member": [None, str(member)]},
        member=member,
    )
    return address


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
    public_ipv4_quarantine_record(address=address.address, member=member, at=now, until=until)
    audit_record(
        actor=actor,
        action="public_ipv4.quarantine",
        obj=address,
        changes={"member": [str(member), None], "quarantined_until": [None, until.isoformat()]},
        member=member,
    )
    return address


def _device_values(device: Device) -> dict[str, Any]:
    return {"name": device.name, "mac": device.mac, "ipv4": device.ipv4, "ipv6": device.ipv6}


def _save_device(device: Device, *, update_fields: list[str] | None = None) -> None:
    """Save in a savepoint and turn a lost race on a UNIQUE constraint into a clear refusal."""
    try:
        with transaction.atomic():
            if update_fields is None:
                device.save(force_insert=True)
            else:
                device.save(update_fields=update_fields)
    except IntegrityError as exc:
        name = _constraint(exc)
        if "mac" in name:
            raise MacInUse(_mac_in_use_message(device.mac)) from None
        if "name" in name:
            raise DeviceNameInUse(_name_in_use_message(device.name)) from None
        if "ipv4" in name or "ipv6" in name:
            raise SubnetExhausted(
                _("Another device took that address at the same moment; please try again.")
            ) from None
        raise


def _mac_in_use_message(mac: str) -> str:
    return _("The MAC address %(mac)s is already registered to a device.") % {"mac": mac}


def _name_in_use_message(name: str) -> str:
    return _("There is already a device called “%(name)s”; choose another name.") % {"name": name}


def _network_row_recorded(
    *,
    actor: User,
    action: str,
    obj: Any,
    before: dict[str, Any],
    after: dict[str, Any],
    member: Member,
) -> None:
    """Audit a change of one of a member's network rows and have the firewalls follow it (once
    per transaction, after the commit)."""
    audit_record(
        actor=actor, action=action, obj=obj, changes=audit_changes(before, after), member=member
    )
    network_changed_on_commit(cause=f"{action} {obj.pk}", actor=actor)


def _lock_member(member: Member) -> Member:
    from apps.members.models import Member

    return (
        Member.objects.select_for_update(of=("self",))
        .select_related("room__building")
        .get(pk=member.pk)
    )


# --- services ---------------------------------------------------------------------------------


@transaction.atomic
def device_add(*, member: Member, name: str, mac: str, actor: User) -> Device:
    """Register a device for `member`: normalised unique MAC, private IPv4 and IPv6 addresses."""
    name = name.strip()
    mac = mac_clean(mac)
    member = _lock_member(member)  # serialises the device limit per member
    if member.is_ended or member.room is None:
        raise MemberStateError(_("This membership has ended; it cannot have devices."))
    limit = NetworkSettings.load().device_limit
    if member.devices.count() >= limit:
        raise DeviceLimitReached(
            _("A member can have at most %(limit)d devices; remove one first.") % {"limit": limit}
        )
    if member.devices.filter(name=name).exists():
        raise DeviceNameInUse(_name_in_use_message(name))
    ipv4 = _private_ipv4_allocate(building=member.room.building)
    if Device.objects.filter(mac=mac).exists():
        raise MacInUse(_mac_in_use_message(mac))
    device = Device(
        member=member, name=name, mac=mac, ipv4=ipv4, ipv6=device_ipv6(room=member.room, mac=mac)
    )
    _save_device(device)
    device_addresses_record(
        device=device, before={}, after=_device_values(device), cause="device.add"
    )
    _network_row_recorded(
        actor=actor,
        action="device.add",
        obj=device,
        before={},
        after=_device_values(device),
        member=member,
    )
    return device


@transaction.atomic
def device_change(
    *, device: Device, actor: User, name: str | None = None, mac: str | None = None
) -> Device:
    """Rename a device or change its MAC (its IPv6 address follows the MAC)."""
    member = _lock_member(device.member)
    device = Device.objects.select_for_update().get(pk=device.pk)
    before = _device_values(device)
    fields: list[str] = []
    if name is not None and name.strip() != device.name:
        name = name.strip()
        if member.devices.filter(name=name).exclude(pk=device.pk).exists():
            raise DeviceNameInUse(_name_in_use_message(name))
        device.name = name
        fields.append("name")
    if mac is not None:
        new_mac = mac_clean(mac)
        if new_mac != device.mac:
            if Device.objects.filter(mac=new_mac).exclude(pk=device.pk).exists():
                raise MacInUse(_mac_in_use_message(new_mac))
            device.mac = new_mac
            device.ipv6 = device_ipv6(room=member.room, mac=new_mac) if member.room else None
            fields += ["mac", "ipv6"]
    if not fields:
        return device
    _save_device(device, update_fields=[*fields, "updated_at"])
    device_addresses_record(
        device=device, before=before, after=_device_values(device), cause="device.change"
    )
    _network_row_recorded(
        actor=actor,
        action="device.change",
        obj=device,
        before=before,
        after=_device_values(device),
        member=member,
    )
    return device


def _device_delete(*, device: Device, actor: User, action: str) -> None:
    """Delete a device with its IPv6 openings and port forwards (each audited).

    Forwards already released with the public address (membership ended) stay as disabled
    history without a device; live ones go with the device.
    """
    for opening in Ipv6Opening.objects.filter(device=device).order_by("id"):
        _opening_delete(opening=opening, actor=actor, member=device.member)
    for forward in PortForward.objects.filter(device=device).order_by("id"):
        if forward.public_address_id is None and not forward.enabled:
            forward.device = None
            forward.save(update_fields=["device", "updated_at"])
        else:
            _forward_delete(forward=forward, actor=actor)
    values = _device_values(device)
    device_addresses_record(device=device, before=values, after={}, cause=action)
    audit_record(
        actor=actor,
        action=action,
        obj=device,
        changes=audit_changes(values, {}),
        member=device.member,
    )
    device.delete()


@transaction.atomic
def device_remove(*, device: Device, actor: User) -> None:
    """Remove a device; its addresses are free again at once (private addresses need no rest)."""
    _lock_member(device.member)
    device = Device.objects.select_related("member").get(pk=device.pk)
    pk = device.pk
    _device_delete(device=device, actor=actor, action="device.remove")
    network_changed_on_commit(cause=f"device.remove {pk}", actor=actor)


def devices_readdress(*, member: Member, room: Room, actor: User) -> None:
    """After a move: new IPv6 from the new room; a new IPv4 when the building changed."""
    devices = list(Device.objects.select_for_update().filter(member=member).order_by("id"))
    if not devices:
        return
    old_building_id = member.room.building_id if member.room else None
    new_ipv4: dict[int, str] = {}
    if room.building_id != old_building_id:
        taken: set[str] = set()
        for device in devices:
            new_ipv4[device.pk] = _private_ipv4_allocate(building=room.building, exclude=taken)
            taken.add(new_ipv4[device.pk])
    for device in devices:
        before = _device_values(device)
        device.ipv4 = new_ipv4.get(device.pk, device.ipv4)
        device.ipv6 = device_ipv6(room=room, mac=device.mac)
        _save_device(device, update_fields=["ipv4", "ipv6", "updated_at"])
        device_addresses_record(
            device=device, before=before, after=_device_values(device), cause="device.readdress"
        )
        audit_record(
            actor=actor,
            action="device.readdress",
            obj=device,
            changes=audit_changes(before, _device_values(device)),
            member=member,
        )


def room_require_subnet(*, room: Room) -> None:
    """Refuse (NoSubnet) when the room's building has no private IPv4 subnet."""
    if not Subnet.objects.filter(building_id=room.building_id, family=Family.IPV4).exists():
        raise NoSubnet(
            _(
                "Room %(room)s has no subnet: building %(building)s has no private IPv4 subnet "
                "yet. An admin adds one under Admin › Subnets."  # noqa: RUF001
            )
            % {"room": room.label, "building": room.building.code}
        )


@transaction.atomic
def subnet_create(*, building: Building, network: str, actor: User | None) -> Subnet:
    """Give a building its private IPv4 subnet or IPv6 prefix; rooms without a /64 get one."""
    net = ipaddress.ip_network(network.strip(), strict=True)
    if net.version == 4 and not net.is_private:
        raise NetworkError(
            _("%(net)s is not a private IPv4 network.") % {"net": net}, field="network"
        )
    if net.version == 6 and net.prefixlen > 63:
        raise NetworkError(
            _("An IPv6 prefix must be /63 or larger, so rooms get /64s."), field="network"
        )
    if Subnet.objects.filter(building=building, family=net.version).exists():
        raise NetworkError(
            _("Building %(building)s already has an IPv%(family)d subnet.")
            % {"building": building.code, "family": net.version},
            field="network",
        )
    overlap = Subnet.objects.filter(network__net_overlaps=str(net)).first()
    if overlap is not None:
        raise NetworkError(
            _("%(net)s overlaps %(other)s.") % {"net": net, "other": overlap}, field="network"
        )
    subnet = Subnet.objects.create(building=building, family=net.version, network=str(net))
    audit_record(
        actor=actor, action="subnet.create", obj=subnet, changes={"network": [None, str(net)]}
    )
    if net.version == 6:
        from apps.members.models import Room

        for room in Room.objects.filter(building=building, ipv6_prefix__isnull=True).order_by("id"):
            room.ipv6_prefix = room_ipv6_prefix_next(building=building)
            room.save(update_fields=["ipv6_prefix"])
    network_changed_on_commit(cause=f"subnet.create {subnet.pk}", actor=actor)
    return subnet


# --- port forwards and IPv6 openings ----------------------------------------------------------

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


# --- policy and shaping profiles (admin) ------------------------------------------------------


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
