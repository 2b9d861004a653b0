"""Reading the address-holder history: the answer to "who had address X at time T?".

The answer is built only from rows (holdings, room stays, DHCP leases) that are shown with it
as evidence, so staff can check it and quote it; anything inferred is said as a note.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.abuse.choices import HolderKind, HoldingState, Verdict
from apps.abuse.models import AddressHolding
from apps.core import localtime
from apps.dhcp.models import Lease, RegistrationRange
from apps.members.models import RoomStay
from apps.network.models import Device, PublicPool, Subnet

if TYPE_CHECKING:
    from apps.abuse.models import AbuseLookup
    from apps.members.models import Member


@dataclass(frozen=True)
class Evidence:
    """One row the answer rests on, as staff can quote it."""

    kind: str  # "holding", "room_stay", "lease"
    ref: int
    role: str  # "answer", "device", "room", "lease", "before", "after"
    what: str
    start: dt.datetime | None
    end: dt.datetime | None
    source: str


@dataclass(frozen=True)
class DeviceAtTime:
    """A device as it was at the asked time (it may have been removed since)."""

    device_ref: int | None
    name: str
    mac: str | None
    ipv4: str | None
    ipv6: str | None
    exists: bool


@dataclass
class LookupAnswer:
    """The plain answer: verdict, holder, devices, room, evidence and notes."""

    address: str
    at: dt.datetime
    verdict: str
    summary: str
    holding: AddressHolding | None = None
    member: Member | None = None
    member_name: str = ""
    room: str = ""
    devices: list[DeviceAtTime] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    lookup: AbuseLookup | None = None

    @property
    def time_zone(self) -> str:
        return settings.TIME_ZONE


def _when(value: dt.datetime | None) -> str:
    if value is None:
        return _("open")
    return localtime.when(value)


def holding_at(*, address: str, at: dt.datetime) -> AddressHolding | None:
    """The row of `address` whose period contains `at` (at most one: the exclusion constraint)."""
    return (
        AddressHolding.objects.filter(address=address, period__contains=at)
        .select_related("member__user")
        .first()
    )


def _holding_evidence(row: AddressHolding, role: str) -> Evidence:
    holder = row.member_name or ""
    if row.device_name or row.mac:
        holder = f"{holder} · {row.device_name or '-'} ({row.mac or '-'})".strip(" ·")
    what = f"{row.address} {row.get_state_display()} {holder}".strip()
    return Evidence(
        kind="holding",
        ref=row.pk,
        role=role,
        what=what,
        start=row.period.lower,
        end=row.period.upper,
        source=f"{row.get_source_display()} ({row.cause})"
        if row.cause
        else row.get_source_display(),
    )


def _neighbours(address: str, at: dt.datetime) -> list[Evidence]:
    """The rows of `address` just before and just after `at`: the gap an answer falls in."""
    rows = AddressHolding.objects.filter(address=address)
    before = rows.filter(period__endswith__lte=at).order_by("-period").first()
    after = rows.filter(period__startswith__gt=at).order_by("period").first()
    out = []
    if before is not None:
        out.append(_holding_evidence(before, "before"))
    if after is not None:
        out.append(_holding_evidence(after, "after"))
    return out


def devices_at(
    *, member_id: int, at: dt.datetime, device_ref: int | None = None
) -> tuple[list[DeviceAtTime], list[AddressHolding]]:
    """The member's devices with the addresses they held at `at` (one device if `device_ref`)."""

    rows = AddressHolding.objects.filter(
        member_id=member_id,
        kind__in=[HolderKind.PRIVATE_IPV4, HolderKind.IPV6],
        state=HoldingState.HELD,
        period__contains=at,
    ).order_by("device_ref", "kind")
    if device_ref is not None:
        rows = rows.filter(device_ref=device_ref)
    rows = list(rows)
    existing = set(
        Device.objects.filter(pk__in={r.device_ref for r in rows}).values_list("pk", flat=True)
    )
    by_device: dict[Any, dict[str, Any]] = {}
    for row in rows:
        entry = by_device.setdefault(
            row.device_ref or row.mac,
            {"device_ref": row.device_ref, "name": row.device_name, "mac": row.mac},
        )
        entry["ipv4" if row.kind == HolderKind.PRIVATE_IPV4 else "ipv6"] = row.address
    devices = [
        DeviceAtTime(
            device_ref=e["device_ref"],
            name=e["name"],
            mac=e["mac"],
            ipv4=e.get("ipv4"),
            ipv6=e.get("ipv6"),
            exists=e["device_ref"] in existing,
        )
        for e in by_device.values()
    ]
    return devices, rows


def _room_at(member_id: int, at: dt.datetime) -> tuple[str, Evidence | None]:
    stay = (
        RoomStay.objects.filter(member_id=member_id, period__contains=at)
        .select_related("room")
        .first()
    )
    if stay is None:
        return "", None
    return stay.room.label, Evidence(
        kind="room_stay",
        ref=stay.pk,
        role="room",
        what=_("lived in %(room)s") % {"room": stay.room.label},
        start=stay.period.lower,
        end=stay.period.upper,
        source=_("room history"),
    )


def _leases_at(address: str, at: dt.datetime) -> list[Evidence]:
    """DHCP leases the hosts reported for the address around `at` (IPv4 only)."""

    if ipaddress.ip_address(address).version != 4:
        return []
    leases = Lease.objects.filter(address=address, starts__lte=at, ends__gt=at).order_by("starts")
    return [
        Evidence(
            kind="lease",
            ref=lease.pk,
            role="lease",
            what=_("DHCP lease to %(mac)s%(name)s from %(host)s")
            % {
                "mac": lease.mac,
                "name": f" ({lease.hostname})" if lease.hostname else "",
                "host": lease.host_name,
            },
            start=lease.starts,
            end=lease.ends,
            source=_("DHCP lease history"),
        )
        for lease in leases[:20]
    ]


def address_is_ours(address: str) -> bool:
    """The address lies in one of our public pools, subnets or registration ranges."""

    ip = ipaddress.ip_address(address)
    networks = [
        *PublicPool.objects.values_list("network", flat=True),
        *Subnet.objects.values_list("network", flat=True),
        *RegistrationRange.objects.values_list("network", flat=True),
    ]
    return any(ip in ipaddress.ip_network(n) for n in networks)


def _summary(answer: LookupAnswer, row: AddressHolding | None) -> str:
    params = {"address": answer.address, "at": _when(answer.at)}
    if row is None:
        return _("Nobody held %(address)s at %(at)s.") % params
    if row.state == HoldingState.QUARANTINED:
        return _(
            "Nobody: %(address)s was quarantined at %(at)s (given back by %(member)s, unused "
            "until %(until)s)."
        ) % {**params, "member": row.member_name or "-", "until": _when(row.period.upper)}
    if row.kind == HolderKind.LEASE:
        return _(
            "%(address)s was leased to the unregistered device %(mac)s at %(at)s (walled garden)."
        ) % {**params, "mac": row.mac}
    if row.kind == HolderKind.PUBLIC_IPV4:
        return _("%(address)s was the public IPv4 of %(member)s at %(at)s.") % {
            **params,
            "member": row.member_name,
        }
    return _("%(address)s was held by the device %(device)s (%(mac)s) of %(member)s at %(at)s.") % {
        **params,
        "device": row.device_name,
        "mac": row.mac,
        "member": row.member_name,
    }


def _holder_details(
    answer: LookupAnswer, member_id: int, at: dt.datetime, *, device_ref: int | None, skip: int
) -> None:
    """Fill in the member's devices (all, or the one `device_ref`) and room at `at`."""
    answer.devices, rows = devices_at(member_id=member_id, at=at, device_ref=device_ref)
    answer.evidence.extend(_holding_evidence(r, "device") for r in rows if r.pk != skip)
    answer.room, stay = _room_at(member_id, at)
    if stay is not None:
        answer.evidence.append(stay)


def _prefix_holder(answer: LookupAnswer) -> bool:
    """An IPv6 address no device was given: devices also pick their own (temporary) addresses
    in their room's /64, and the firewall lets them send from any address of a /64 whose
    devices all belong to one member. So that member is the answer; in a /64 shared by several
    members only the devices' own addresses pass, and nobody is."""
    ip = ipaddress.ip_address(answer.address)
    if ip.version != 6:
        return False
    net = str(ipaddress.ip_network(f"{ip}/64", strict=False))
    rows = list(
        AddressHolding.objects.filter(
            kind=HolderKind.IPV6,
            state=HoldingState.HELD,
            period__contains=answer.at,
            address__net_contained_or_equal=net,
        ).select_related("member__user")
    )
    members = {r.member_id for r in rows}
    if len(members) > 1:
        answer.notes.append(
            _(
                "The /64 %(net)s was shared by devices of several members then; the firewall "
                "let only the devices' own addresses send from it."
            )
            % {"net": net}
        )
    if len(members) != 1 or None in members:
        return False
    first = rows[0]
    answer.verdict = Verdict.HELD
    answer.member, answer.member_name = first.member, first.member_name
    _holder_details(answer, first.member_id, answer.at, device_ref=None, skip=0)
    answer.summary = _(
        "%(address)s is no device's registered address, but lies in the /64 %(net)s, whose "
        "devices all belonged to %(member)s at %(at)s (devices choose temporary IPv6 addresses "
        "in it)."
    ) % {"address": answer.address, "net": net, "member": first.member_name, "at": _when(answer.at)}
    return True


def lookup_answer(*, address: str, at: dt.datetime) -> LookupAnswer:
    """The answer for a normalised address and an aware time (see abuse_lookup, which audits)."""
    row = holding_at(address=address, at=at)
    answer = LookupAnswer(address=address, at=at, verdict=Verdict.NOBODY, summary="")
    if row is None:
        answer.evidence.extend(_neighbours(address, at))
        if _prefix_holder(answer):
            return answer
    elif row.state == HoldingState.QUARANTINED:
        answer.verdict = Verdict.QUARANTINED
        answer.holding = row
        answer.evidence.append(_holding_evidence(row, "answer"))
    else:
        answer.verdict = Verdict.HELD
        answer.holding = row
        answer.member = row.member
        answer.member_name = row.member_name
        answer.evidence.append(_holding_evidence(row, "answer"))
        if row.member_id is not None:
            one = None if row.kind == HolderKind.PUBLIC_IPV4 else row.device_ref
            _holder_details(answer, row.member_id, at, device_ref=one, skip=row.pk)
    answer.evidence.extend(_leases_at(address, at))
    answer.summary = _summary(answer, row)
    _add_notes(answer, row)
    return answer


def _add_notes(answer: LookupAnswer, row: AddressHolding | None) -> None:
    days = int(settings.PORTAL_ABUSE_HISTORY_DAYS)
    if row is None and answer.at < timezone.now() - dt.timedelta(days=days):
        answer.notes.append(
            _(
                "The history keeps ended holdings for %(days)d days only; a holder before "
                "then may have been forgotten."
            )
            % {"days": days}
        )
    if row is None and not address_is_ours(answer.address):
        answer.notes.append(
            _("%(address)s is in none of our public pools, subnets or registration ranges.")
            % {"address": answer.address}
        )
    if row is not None and row.kind == HolderKind.LEASE and row.mac:
        device = Device.objects.filter(mac=row.mac).select_related("member").first()
        if device is not None:
            answer.notes.append(
                _(
                    "That MAC address is registered now: device “%(device)s” of %(member)s "
                    "(registered later; not proof of who used it then)."
                )
                % {"device": device.name, "member": device.member}
            )
    macs = {e.what for e in answer.evidence if e.kind == "lease"}
    if row is not None and row.mac and macs and not any(row.mac in m for m in macs):
        answer.notes.append(
            _("The DHCP leases of that time name another MAC address than the holder's.")
        )
