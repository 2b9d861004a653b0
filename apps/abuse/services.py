"""Writing the address-holder history, and the audited lookup in it.

The network and member services call the `*_record` functions inside their own transaction,
with the same timestamp they write, so the history and the addresses can never disagree: an
assignment that rolls back leaves no holding behind. Periods are half-open, [from, until): at
the instant an address changes hands the new holder holds it and the old one no longer does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import structlog
from django.conf import settings
from django.db import transaction
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange
from django.db.models import Q
from django.utils import timezone

from apps.abuse.choices import HolderKind, HoldingSource, HoldingState
from apps.abuse.inputs import lookup_inputs_clean
from apps.abuse.models import AbuseLookup, AddressHolding
from apps.abuse.selectors import LookupAnswer, lookup_answer
from apps.audit.services import audit_record

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from apps.members.models import Member
    from apps.network.models import Device

log = structlog.get_logger(__name__)

# Device fields whose change starts a new holding (the MAC is evidence: a new MAC, a new row).
DEVICE_FAMILIES = (("ipv4", HolderKind.PRIVATE_IPV4), ("ipv6", HolderKind.IPV6))


# --- the primitives: open and close one address's holding --------------------------------------


def member_label(member: Member) -> str:
    """How the history names a member: full name and login (names repeat; logins do not)."""
    login = member.user.get_username()
    name = str(member)
    return (name if name == login else f"{name} ({login})")[:150]


def _cut_at(address: str, at: dt.datetime) -> None:
    """End every row of `address` still running at `at` (a row starting at or after `at` would
    be empty and is dropped), so the row opened next cannot overlap it."""
    rows = AddressHolding.objects.select_for_update().filter(
        Q(period__upper_inf=True) | Q(period__endswith__gt=at), address=address
    )
    for row in rows:
        if row.period.lower is not None and row.period.lower < at:
            row.period = DateTimeTZRange(row.period.lower, at)
            row.save(update_fields=["period"])
        else:
            log.warning("abuse.holding_dropped", address=address, row=row.pk, at=at.isoformat())
            row.delete()


def holding_open(
    *,
    address: str,
    kind: str,
    at: dt.datetime,
    until: dt.datetime | None = None,
    state: str = HoldingState.HELD,
    member: Member | None = None,
    device: Device | None = None,
    mac: str | None = None,
    source: str = HoldingSource.RECORDED,
    cause: str = "",
) -> AddressHolding:
    """Record that `address` is held (or quarantined) from `at` on, ending whatever row of the
    address was still running then."""
    _cut_at(address, at)
    return AddressHolding.objects.create(
        address=address,
        kind=kind,
        state=state,
        period=DateTimeTZRange(at, until),
        member=member,
        member_name=member_label(member) if member is not None else "",
        device_ref=device.pk if device is not None else None,
        device_name=device.name if device is not None else "",
        mac=mac or (device.mac if device is not None else None),
        source=source,
        cause=cause[:60],
    )


def holding_close(*, address: str, at: dt.datetime) -> None:
    """Record that whoever held `address` gave it back at `at`."""
    _cut_at(address, at)


# --- called by the network services --------------------------------------------------------------


def public_ipv4_assign_record(*, address: str, member: Member, at: dt.datetime) -> None:
    """A member received a public IPv4 (ends the quarantine row if one was still running)."""
    holding_open(
        address=address,
        kind=HolderKind.PUBLIC_IPV4,
        at=at,
        member=member,
        cause="public_ipv4.assign",
    )


def public_ipv4_quarantine_record(
    *, address: str, member: Member, at: dt.datetime, until: dt.datetime
) -> None:
    """A member gave their public IPv4 back: it rests in quarantine [at, until)."""
    holding_open(
        address=address,
        kind=HolderKind.PUBLIC_IPV4,
        state=HoldingState.QUARANTINED,
        at=at,
        until=until,
        member=member,
        cause="public_ipv4.quarantine",
    )


def device_addresses_record(
    *,
    device: Device,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    cause: str,
    at: dt.datetime | None = None,
) -> None:
    """A device got, changed or gave back addresses (`before`/`after`: its ipv4, ipv6 and mac;
    `{}` for a new or a removed device). A changed MAC starts new rows for its addresses."""
    at = at or timezone.now()
    for field, kind in DEVICE_FAMILIES:
        old, new = before.get(field), after.get(field)
        if old == new and before.get("mac") == after.get("mac"):
            continue
        if old:
            holding_close(address=old, at=at)
        if new:
            holding_open(
                address=new,
                kind=kind,
                at=at,
                member=device.member,
                device=device,
                mac=after.get("mac"),
                cause=cause,
            )


def registration_leases_record(
    *, leases: Iterable[tuple[str, str, dt.datetime, dt.datetime]], continues_within: dt.timedelta
) -> int:
    """DHCP leases of unknown devices (registration ranges: nothing else records who held those
    addresses): a lease that continues the last row of its address (same MAC, renewed before
    that row ran out) extends it, any other starts a row. Returns the rows written."""
    written = 0
    for address, mac, starts, ends in leases:
        last = (
            AddressHolding.objects.select_for_update()
            .filter(address=address, kind=HolderKind.LEASE)
            .order_by("-period")
            .first()
        )
        upper = last.period.upper if last is not None else None
        if last is not None and last.mac == mac and upper and starts <= upper + continues_within:
            if ends > upper:
                last.period = DateTimeTZRange(last.period.lower, ends)
                last.save(update_fields=["period"])
                written += 1
            continue
        if last is not None and starts < last.period.lower:
            continue  # an older report than what is recorded (the other host of a pair)
        holding_open(
            address=address,
            kind=HolderKind.LEASE,
            at=starts,
            until=ends,
            mac=mac,
            source=HoldingSource.DHCP,
            cause="dhcp.lease",
        )
        written += 1
    return written


# --- retention ----------------------------------------------------------------------------------


def retention_days() -> int:
    """How long ended holdings are kept (settings.PORTAL_ABUSE_HISTORY_DAYS)."""
    return int(settings.PORTAL_ABUSE_HISTORY_DAYS)


def holdings_prune(*, now: dt.datetime | None = None) -> int:
    """Forget holdings that ended longer ago than the retention setting (running ones stay)."""
    cutoff = (now or timezone.now()) - dt.timedelta(days=retention_days())
    deleted, _ = AddressHolding.objects.filter(
        period__upper_inf=False, period__endswith__lt=cutoff
    ).delete()
    return deleted


# --- the lookup ---------------------------------------------------------------------------------


@transaction.atomic
def abuse_lookup(
    *, actor: User | None, address: str, at: str | dt.datetime, reason: str
) -> LookupAnswer:
    """Who held `address` at `at`: member, devices, room and the evidence rows. Audited with the
    reason; refused with LookupInvalid (nothing read or written) when an input is wrong."""
    address, when, reason = lookup_inputs_clean(address=address, at=at, reason=reason)
    answer = lookup_answer(address=address, at=when)
    is_user = getattr(actor, "is_authenticated", False)
    lookup = AbuseLookup.objects.create(
        actor=actor if is_user else None,
        actor_name=actor.get_username() if is_user else "system",
        address=address,
        at=when,
        reason=reason,
        verdict=answer.verdict,
        member=answer.member,
    )
    audit_record(
        actor=actor,
        action="abuse.lookup",
        obj=lookup,
        changes={
            "address": [None, address],
            "at": [None, when.isoformat()],
            "reason": [None, reason],
            "verdict": [None, answer.verdict],
        },
    )
    answer.lookup = lookup
    return answer
