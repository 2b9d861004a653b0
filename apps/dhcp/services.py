"""Leases read back from the hosts' Kea, kept as a bounded history (who held which address when)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from typing import Any

import structlog
from django.db import transaction
from django.utils import timezone

from apps.dhcp.models import DhcpSettings, Lease, RegistrationRange
from apps.dhcp.signals import registration_leases_seen
from apps.firewall.models import FirewallHost
from apps.firewall.transport import FirewallUnreachable, session_for
from workers.ruleset.snapshot import MAC_RE

log = structlog.get_logger(__name__)
# A lease Kea renewed within this long after the stored end is the same lease continuing.
CONTINUES_WITHIN = dt.timedelta(seconds=60)
MAX_LEASES_PER_HOST = 1_000_000


@dataclass(frozen=True)
class LeaseRow:
    """One lease as a host reported it, validated into typed values."""

    address: str
    mac: str
    starts: dt.datetime  # Kea's cltt: when the client last renewed
    ends: dt.datetime
    hostname: str


def lease_rows_parse(raw: Any) -> tuple[list[LeaseRow], int]:
    """The helper's rows [[address, mac, cltt, valid_lft, hostname, state], ...] as typed rows,
    and how many were skipped as malformed (never trusted: they come from a host)."""
    rows: list[LeaseRow] = []
    skipped = 0
    if not isinstance(raw, list):
        return rows, 0
    for item in raw[:MAX_LEASES_PER_HOST]:
        try:
            address, mac, cltt, valid, hostname, state = item
            address = str(ipaddress.IPv4Address(address))
            mac = str(mac).lower()
            if not MAC_RE.fullmatch(mac) or state not in (0, 1, 2):
                raise ValueError(mac)
            if state != 0 or not isinstance(cltt, int) or not isinstance(valid, int):
                raise ValueError("not a default-state lease")  # declined/expired-reclaimed
            starts = dt.datetime.fromtimestamp(cltt, dt.UTC)
            ends = starts + dt.timedelta(seconds=max(0, valid))
        except (TypeError, ValueError, OverflowError, OSError):
            skipped += 1
            continue
        name = "".join(ch for ch in str(hostname or "")[:253] if ch.isprintable())
        rows.append(LeaseRow(address, mac, starts, ends, name))
    return rows, skipped


def _registration_networks() -> list[ipaddress.IPv4Network]:
    return [
        ipaddress.IPv4Network(n)
        for n in RegistrationRange.objects.values_list("network", flat=True)
    ]


@transaction.atomic
def leases_store(
    *, host: FirewallHost, rows: list[LeaseRow], now: dt.datetime | None = None
) -> int:
    """Merge one host's current leases into the history: a lease that continues (same MAC and
    address, renewed before its stored end ran out) extends its row; anything else starts a
    new row. Leases in a registration range (unknown devices) also go into the address-holder
    history. Returns the number of lease rows written."""
    now = now or timezone.now()
    registration = _registration_networks()
    spans = [(int(n.network_address), int(n.broadcast_address)) for n in registration]
    unknown = [
        (row.address, row.mac, row.starts, row.ends)
        for row in rows
        if spans and any(a <= int(ipaddress.IPv4Address(row.address)) <= b for a, b in spans)
    ]
    registration_leases_seen.send(sender=Lease, leases=unknown, continues_within=CONTINUES_WITHIN)
    horizon = now - dt.timedelta(days=7)
    open_rows = {
        (mac, address): (pk, ends)
        for pk, mac, address, ends in Lease.objects.filter(
            host_name=host.name, ends__gte=horizon
        ).values_list("pk", "mac", "address", "ends")
    }
    updates: list[Lease] = []
    creates: list[Lease] = []
    for row in rows:
        known = open_rows.get((row.mac, row.address))
        if known is not None and row.starts <= known[1] + CONTINUES_WITHIN:
            if row.ends > known[1]:
                updates.append(
                    Lease(pk=known[0], ends=row.ends, seen_at=now, hostname=row.hostname)
                )
            continue
        address = ipaddress.IPv4Address(row.address)
        creates.append(
            Lease(
                host=host,
                host_name=host.name,
                mac=row.mac,
                address=row.address,
                hostname=row.hostname,
                registration=any(address in net for net in registration),
                starts=row.starts,
                ends=row.ends,
                seen_at=now,
            )
        )
    if updates:
        Lease.objects.bulk_update(updates, ["ends", "seen_at", "hostname"], batch_size=2000)
    if creates:
        Lease.objects.bulk_create(creates, batch_size=2000)
    return len(updates) + len(creates)


def leases_prune(*, now: dt.datetime | None = None) -> int:
    """Forget leases that ended longer ago than the retention setting."""
    now = now or timezone.now()
    days = (DhcpSettings.objects.filter(id=1).values_list("lease_retention_days", flat=True).first()
            or DhcpSettings._meta.get_field("lease_retention_days").default)  # fmt: skip
    deleted, _ = Lease.objects.filter(ends__lt=now - dt.timedelta(days=days)).delete()
    return deleted


@dataclass(frozen=True)
class CollectOutcome:
    host: str
    ok: bool
    leases: int = 0
    written: int = 0
    skipped: int = 0
    error: str = ""


def host_leases_collect(*, host: FirewallHost) -> CollectOutcome:
    """Read one host's leases (the helper's `dhcp-leases` verb) and merge them."""
    try:
        with session_for(host) as session:
            reply = session.call("dhcp-leases", timeout=120)
    except FirewallUnreachable as exc:
        return CollectOutcome(host.name, False, error=str(exc))
    if not reply.ok:
        return CollectOutcome(host.name, False, error=reply.message)
    rows, skipped = lease_rows_parse(reply.data.get("leases"))
    written = leases_store(host=host, rows=rows)
    return CollectOutcome(host.name, True, len(rows), written, skipped)


def leases_collect() -> list[CollectOutcome]:
    """Every enabled DHCP host's leases, then the retention prune."""
    outcomes = []
    for host in FirewallHost.objects.filter(enabled=True, serves_dhcp=True).order_by("name"):
        outcome = host_leases_collect(host=host)
        if not outcome.ok:
            log.warning("dhcp.leases_collect_failed", host=host.name, error=outcome.error[:300])
        outcomes.append(outcome)
    leases_prune()
    return outcomes
