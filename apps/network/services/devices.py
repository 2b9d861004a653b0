"""Devices and subnets: register, change, remove, re-address after a move; one transaction
each, audited, hooked."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils.translation import gettext as _

from apps.audit.services import audit_changes, audit_record
from apps.members.models import Room
from apps.network.errors import (
    DeviceLimitReached,
    DeviceNameInUse,
    MacInUse,
    MemberStateError,
    NetworkError,
    NoSubnet,
)
from apps.network.hooks import network_changed_on_commit
from apps.network.models import (
    Device,
    Family,
    Ipv6Opening,
    ManagementNetwork,
    NetworkSettings,
    PortForward,
    Subnet,
)
from apps.network.services.forwards import _forward_delete, _opening_delete
from apps.network.services.helpers import (
    _device_values,
    _lock_member,
    _mac_in_use_message,
    _name_in_use_message,
    _network_row_recorded,
    _private_ipv4_allocate,
    _save_device,
    device_ipv6,
    mac_clean,
    room_ipv6_prefix_next,
)
from apps.network.signals import device_addresses_changed

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from apps.members.models import Building, Member, Room


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
    _addresses_changed(device=device, before={}, after=_device_values(device), cause="device.add")
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
    _addresses_changed(
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


def _addresses_changed(**change: Any) -> None:
    """Tell the floors above (the abuse history) what the device holds now."""
    change.setdefault("at", None)
    device_addresses_changed.send(sender=Device, **change)


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
    _addresses_changed(device=device, before=values, after={}, cause=action)
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
        _addresses_changed(
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
def _subnet_reserved_check(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> None:
    """Refuse a subnet that overlaps a registration range (unknown devices would get member
    addresses), a management network (the firewalls never filter it) or holds a site's
    member gateway (a device would be given the router's address)."""
    from django.apps import apps as django_apps

    clash = ManagementNetwork.objects.filter(network__net_overlaps=str(net)).first()
    if clash is not None:
        raise NetworkError(
            _("%(net)s overlaps the management network %(other)s.")
            % {"net": net, "other": clash.network},
            field="network",
        )
    if net.version != 4:
        return
    if django_apps.is_installed("apps.dhcp"):  # a floor above: read by model name
        ranges = django_apps.get_model("dhcp", "RegistrationRange").objects
        taken = ranges.filter(network__net_overlaps=str(net)).first()
        if taken is not None:
            raise NetworkError(
                _("%(net)s overlaps the registration range %(other)s.")
                % {"net": net, "other": taken.network},
                field="network",
            )
    if django_apps.is_installed("apps.firewall"):
        for site, gateway in django_apps.get_model("firewall", "Site").objects.values_list(
            "name", "gateway4"
        ):
            if gateway and ipaddress.ip_address(gateway) in net:
                raise NetworkError(
                    _("%(net)s holds the gateway %(gateway)s of site %(site)s.")
                    % {"net": net, "gateway": gateway, "site": site},
                    field="network",
                )


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
    _subnet_reserved_check(net)
    subnet = Subnet.objects.create(building=building, family=net.version, network=str(net))
    audit_record(
        actor=actor, action="subnet.create", obj=subnet, changes={"network": [None, str(net)]}
    )
    if net.version == 6:
        for room in Room.objects.filter(building=building, ipv6_prefix__isnull=True).order_by("id"):
            room.ipv6_prefix = room_ipv6_prefix_next(building=building)
            room.save(update_fields=["ipv6_prefix"])
    network_changed_on_commit(cause=f"subnet.create {subnet.pk}", actor=actor)
    return subnet
