"""Writes to network state: addresses and devices. One transaction each, audited, hooked."""

from __future__ import annotations

import datetime as dt
import ipaddress
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import formats, timezone
from django.utils.translation import gettext as _

from apps.audit.services import audit_changes, audit_record
from apps.network.errors import (
    DeviceLimitReached,
    DeviceNameInUse,
    MacInUse,
    MemberStateError,
    NetworkError,
    NoSubnet,
    PoolExhausted,
    QuarantineFull,
    SubnetExhausted,
)
from apps.network.hooks import network_changed_on_commit
from apps.network.mac import eui64_interface_id, mac_normalize, mac_validate_unicast
from apps.network.models import Device, Family, NetworkSettings, PublicAddress, PublicPool, Subnet

if TYPE_CHECKING:
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


def public_ipv4_allocate(*, member: Member, actor: Any) -> PublicAddress:
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
    audit_record(
        actor=actor,
        action="public_ipv4.assign",
        obj=address,
        changes={"member": [None, str(member)]},
        member=member,
    )
    return address


def public_ipv4_release(*, member: Member, actor: Any) -> PublicAddress | None:
    """Take the member's public IPv4 back into quarantine (admin setting, default 30 days)."""
    address = PublicAddress.objects.select_for_update().filter(member=member).first()
    if address is None:
        return None
    days = NetworkSettings.load().quarantine_days
    until = timezone.now() + dt.timedelta(days=days)
    address.member, address.quarantined_until, address.assigned_at = None, until, None
    address.save(update_fields=["member", "quarantined_until", "assigned_at"])
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


def _lock_member(member: Member) -> Member:
    from apps.members.models import Member

    return (
        Member.objects.select_for_update(of=("self",))
        .select_related("room__building")
        .get(pk=member.pk)
    )


# --- services ---------------------------------------------------------------------------------


@transaction.atomic
def device_add(*, member: Member, name: str, mac: str, actor: Any) -> Device:
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
    audit_record(
        actor=actor,
        action="device.add",
        obj=device,
        changes=audit_changes({}, _device_values(device)),
        member=member,
    )
    network_changed_on_commit(cause=f"device.add {device.pk}", actor=actor)
    return device


@transaction.atomic
def device_change(
    *, device: Device, actor: Any, name: str | None = None, mac: str | None = None
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
    audit_record(
        actor=actor,
        action="device.change",
        obj=device,
        changes=audit_changes(before, _device_values(device)),
        member=member,
    )
    network_changed_on_commit(cause=f"device.change {device.pk}", actor=actor)
    return device


def _device_delete(*, device: Device, actor: Any, action: str) -> None:
    values = _device_values(device)
    audit_record(
        actor=actor,
        action=action,
        obj=device,
        changes=audit_changes(values, {}),
        member=device.member,
    )
    device.delete()


@transaction.atomic
def device_remove(*, device: Device, actor: Any) -> None:
    """Remove a device; its addresses are free again at once (private addresses need no rest)."""
    _lock_member(device.member)
    device = Device.objects.select_related("member").get(pk=device.pk)
    pk = device.pk
    _device_delete(device=device, actor=actor, action="device.remove")
    network_changed_on_commit(cause=f"device.remove {pk}", actor=actor)


def devices_readdress(*, member: Member, room: Room, actor: Any) -> None:
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


__all__ = [
    "InvalidMac",
    "MemberStateError",
    "device_add",
    "device_change",
    "device_remove",
    "public_ipv4_allocate",
    "public_ipv4_release",
]


@transaction.atomic
def subnet_create(*, building: Building, network: str, actor: Any) -> Subnet:
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
