"""Helpers that network services call inside their own transaction: MAC cleaning, private and
public address allocation (public IPv4 allocate/release), room IPv6 prefixes, device rows."""

from __future__ import annotations

import datetime as dt
import ipaddress
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import formats, timezone
from django.utils.translation import gettext as _

from apps.audit.services import audit_changes, audit_record
from apps.core.mac import eui64_interface_id, mac_normalize, mac_validate_unicast
from apps.members.models import Member, Room
from apps.network.errors import (
    DeviceNameInUse,
    MacInUse,
    NetworkError,
    NoSubnet,
    PoolExhausted,
    QuarantineFull,
    SubnetExhausted,
)
from apps.network.hooks import network_changed_on_commit
from apps.network.models import Device, Family, PublicAddress, PublicPool, Subnet
from apps.network.signals import public_ipv4_assigned

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from apps.members.models import Building, Member, Room


class InvalidMac(NetworkError):
    field = "mac"


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
    public_ipv4_assigned.send(sender=PublicAddress, address=address.address, member=member, at=now)
    audit_record(
        actor=actor,
        action="public_ipv4.assign",
        obj=address,
        changes={"member": [None, str(member)]},
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
    return (
        Member.objects.select_for_update(of=("self",))
        .select_related("room__building")
        .get(pk=member.pk)
    )
