"""Leases read back from the hosts' Kea, kept as a bounded history (who held which address when)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from typing import Any

import structlog
from django.db import connection, transaction
from django.utils import timezone

from apps.dhcp.models import DhcpSettings, Lease, LeaseCursor, RegistrationRange
from apps.dhcp.signals import registration_leases_seen
from apps.firewall.models import FirewallHost
from apps.firewall.transport import LEASE_POOL, FirewallUnreachable, pooled_session_for
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
    history. Returns the number of lease rows written.

    The reading is copied into a staging table (COPY, psycopg 3) and merged in one statement:
    no row objects, no per-row round trips (a first reading of 255,658 leases on ten hosts took
    37 s through bulk_create; docs/BENCHMARKS.md "Sites")."""
    now = now or timezone.now()
    registration = _registration_networks()
    spans = [(int(n.network_address), int(n.broadcast_address)) for n in registration]
    staged: list[tuple[str, str, str, bool, dt.datetime, dt.datetime]] = []
    unknown = []
    for row in rows:
        number = int(ipaddress.IPv4Address(row.address))
        walled = bool(spans) and any(a <= number <= b for a, b in spans)
        if walled:
            unknown.append((row.address, row.mac, row.starts, row.ends))
        staged.append((row.mac, row.address, row.hostname, walled, row.starts, row.ends))
    registration_leases_seen.send(sender=Lease, leases=unknown, continues_within=CONTINUES_WITHIN)
    if not staged:
        return 0
    params = {
        "host": host.pk, "host_name": host.name, "now": now,
        "horizon": now - dt.timedelta(days=7), "within": CONTINUES_WITHIN,
    }  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(LEASE_STAGE)
        with cursor.cursor.copy(
            "COPY dhcp_lease_reading (mac, address, hostname, registration, starts, ends) "
            "FROM STDIN"
        ) as copy:
            for values in staged:
                copy.write_row(values)
        cursor.execute(LEASE_MERGE, params)
        extended, created = cursor.fetchone()
    return extended + created


# The reading, one row per lease (session-local; emptied at commit and before each use).
LEASE_STAGE = """
CREATE TEMPORARY TABLE IF NOT EXISTS dhcp_lease_reading (
    mac macaddr NOT NULL, address inet NOT NULL, hostname text NOT NULL,
    registration boolean NOT NULL, starts timestamptz NOT NULL, ends timestamptz NOT NULL
) ON COMMIT DELETE ROWS;
TRUNCATE dhcp_lease_reading
"""

# Each lease against the host's open row of that MAC and address (ended within the last seven
# days; the latest when there are several): it continues that row when it was renewed before
# the row's end ran out (plus CONTINUES_WITHIN) and is extended only when it ends later;
# everything else is a new row.
LEASE_MERGE = """
WITH open AS (
    SELECT DISTINCT ON (mac, address) id, mac, address, ends
    FROM dhcp_lease
    WHERE host_name = %(host_name)s AND ends >= %(horizon)s
    ORDER BY mac, address, ends DESC, id DESC
),
matched AS (
    SELECT r.*, o.id AS open_id, o.ends AS open_ends
    FROM dhcp_lease_reading r
    LEFT JOIN open o
        ON o.mac = r.mac AND o.address = r.address AND r.starts <= o.ends + %(within)s
),
extended AS (
    UPDATE dhcp_lease l
    SET ends = m.ends, seen_at = %(now)s, hostname = m.hostname
    FROM (
        SELECT DISTINCT ON (open_id) open_id, ends, hostname FROM matched
        WHERE open_id IS NOT NULL AND ends > open_ends
        ORDER BY open_id, ends DESC
    ) AS m
    WHERE l.id = m.open_id
    RETURNING l.id
),
created AS (
    INSERT INTO dhcp_lease
        (host_id, host_name, mac, address, hostname, registration, starts, ends, seen_at)
    SELECT %(host)s, %(host_name)s, mac, address, hostname, registration, starts, ends, %(now)s
    FROM matched
    WHERE open_id IS NULL
    RETURNING id
)
SELECT (SELECT count(*) FROM extended), (SELECT count(*) FROM created)
"""


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
    full: bool = True  # every lease (no cursor, or the host started over); else what changed
    gone: int = 0  # leases Kea deleted since the last reading (the history keeps their rows)
    source: str = ""  # where the host read them: file, rotated (after an LFC), files, kea


# The host's cursor, checked like everything a host sends: (name, upper bound) of each value.
CURSOR_FIELDS = (("inode", 1 << 63), ("offset", 1 << 62), ("check", 1 << 48))


def cursor_parse(raw: Any) -> tuple[int, int, int] | None:
    """The host's cursor [inode, offset, check] as typed values, or None (no file, malformed)."""
    if not isinstance(raw, list) or len(raw) != len(CURSOR_FIELDS):
        return None
    if not all(
        type(v) is int and 0 <= v < hi for v, (_name, hi) in zip(raw, CURSOR_FIELDS, strict=True)
    ):
        return None
    return (raw[0], raw[1], raw[2])


def cursor_args(host: FirewallHost) -> list[str]:
    """The dhcp-leases arguments naming where the host's last stored reading ended (none: the
    host answers with every lease)."""
    cursor = LeaseCursor.objects.filter(host=host).first()
    if cursor is None:
        return []
    return ["--since-inode", str(cursor.inode), "--since-offset", str(cursor.offset),
            "--since-check", str(cursor.fingerprint)]  # fmt: skip


@transaction.atomic
def lease_round_store(
    *, host: FirewallHost, data: Any, now: dt.datetime | None = None
) -> CollectOutcome:
    """One dhcp-leases answer merged into the history, and the host's cursor moved to where it
    ends, in one transaction. A full answer and an answer of what changed merge the same way
    (a lease that did not change leaves the history as it is), so a round of changes leaves
    the same history as a full reading would (tests/integration/dhcp/test_lease_rounds.py)."""
    now = now or timezone.now()
    data = data if isinstance(data, dict) else {}
    rows, skipped = lease_rows_parse(data.get("leases"))
    full = data.get("full") is not False
    written = leases_store(host=host, rows=rows, now=now)
    cursor = cursor_parse(data.get("cursor"))
    if cursor is None:
        LeaseCursor.objects.filter(host=host).delete()
    else:
        inode, offset, check = cursor
        defaults: dict[str, Any] = {"inode": inode, "offset": offset, "fingerprint": check,
                                    "read_at": now}  # fmt: skip
        if full:
            defaults["full_at"] = now
        LeaseCursor.objects.update_or_create(host=host, defaults=defaults)
    gone = data.get("gone")
    return CollectOutcome(
        host.name, True, len(rows), written, skipped, full=full,
        gone=len(gone) if isinstance(gone, list) else 0, source=str(data.get("from") or "")[:20],
    )  # fmt: skip


def host_leases_collect(*, host: FirewallHost) -> CollectOutcome:
    """Read one host's leases (the helper's `dhcp-leases` verb: what changed since the last
    stored reading, or every lease) and merge them."""
    since = cursor_args(host)
    try:  # the connection (and its agent) stays open for the next round: no handshake
        with pooled_session_for(host, LEASE_POOL) as session:
            reply = session.call("dhcp-leases", *since, timeout=120)
    except FirewallUnreachable as exc:
        return CollectOutcome(host.name, False, error=str(exc))
    if not reply.ok:
        if since and reply.data.get("error") == "refused":
            # A host agent older than the cursor (put back by hand): full readings from now.
            LeaseCursor.objects.filter(host=host).delete()
        return CollectOutcome(host.name, False, error=reply.message)
    return lease_round_store(host=host, data=reply.data)


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
