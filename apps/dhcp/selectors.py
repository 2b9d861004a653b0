"""Read-side queries of the lease history."""

from __future__ import annotations

from collections.abc import Iterable

from apps.core.mac import mac_parse
from apps.dhcp.models import Lease, RegistrationRange
from apps.network.models import Device


def newest_leases(macs: Iterable[str]) -> dict[str, Lease]:
    """The newest lease of each MAC (one query)."""
    macs = [m for m in macs if m]
    if not macs:
        return {}
    rows = Lease.objects.filter(mac__in=macs).order_by("mac", "-starts", "-id").distinct("mac")
    return {lease.mac: lease for lease in rows}


def lease_search(*, kind: str, query: str, limit: int = 10) -> list[Lease]:
    """The newest leases of a MAC or an IPv4 address (office-hours search), each with
    `device` set when the MAC is registered."""
    import ipaddress

    if kind == "mac":
        mac = mac_parse(query)
        if not mac:
            return []
        leases = list(Lease.objects.filter(mac=mac).order_by("-starts", "-id")[:limit])
    elif kind == "ipv4":
        address = str(ipaddress.IPv4Address(query.strip()))
        leases = list(Lease.objects.filter(address=address).order_by("-starts", "-id")[:limit])
    else:
        return []
    devices = {
        d.mac: d
        for d in Device.objects.filter(mac__in={lease.mac for lease in leases}).select_related(
            "member__user"
        )
    }
    for lease in leases:
        lease.device = devices.get(lease.mac)
    return leases


def unknown_devices_near(
    *, building_id: int | None, hours: int = 2, limit: int = 20
) -> list[Lease]:
    """Devices without a registration seen in a building's registration range lately (one row
    per MAC, newest first): what a volunteer registers with a click at the desk."""
    import datetime as dt

    from django.utils import timezone

    ranges = RegistrationRange.objects.all()
    if building_id is not None:
        ranges = ranges.filter(building_id=building_id)
    networks = list(ranges.values_list("network", flat=True))
    if not networks:
        return []
    from django.db.models import Q

    inside = Q()
    for net in networks:
        inside |= Q(address__net_contained_or_equal=net)
    rows = (
        Lease.objects.filter(
            inside, registration=True, ends__gte=timezone.now() - dt.timedelta(hours=hours)
        )
        .exclude(mac__in=Device.objects.values("mac"))
        .order_by("mac", "-starts", "-id")
        .distinct("mac")
    )
    return sorted(rows, key=lambda lease: lease.starts, reverse=True)[:limit]
