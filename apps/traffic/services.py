"""Collect traffic from the hosts (the helper's `traffic` verb), store it in buckets, roll up.

A collection is idempotent: it stores the difference between a host's totals and the totals it
reported last (`TrafficCounter`), so reading the same totals twice adds nothing. A total below
the last one, or a new epoch (the host rebooted, or lost its carried totals), starts over: the
new total is all new traffic. Traffic of a key that is nobody's now (a device deleted since) is
counted in the outcome as unattributed and stored nowhere.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import structlog
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum
from django.utils import timezone

from apps.firewall.models import FirewallHost
from apps.firewall.transport import FirewallUnreachable, session_for
from apps.network.models import Device
from apps.notifications.choices import NoticeKind
from apps.notifications.models import Notice
from apps.notifications.services import _mail_soon
from apps.traffic.models import Span, TrafficBucket, TrafficCounter

log = structlog.get_logger(__name__)

# set -> (direction, kind): kind "4" a device IPv4, "net" a member /64, "6" a device IPv6
ACCT_SETS: dict[str, tuple[str, str]] = {
    "acct4_in": ("in", "4"),
    "acct4_out": ("out", "4"),
    "acct6n_in": ("in", "net"),
    "acct6n_out": ("out", "net"),
    "acct6_in": ("in", "6"),
    "acct6_out": ("out", "6"),
}
EPOCH_RE = re.compile(r"[0-9a-f]{1,32}")
MAX_COUNT = 2**63 - 1


@dataclass(frozen=True)
class Row:
    set_name: str
    key: str
    packets: int
    octets: int


@dataclass(frozen=True)
class TrafficOutcome:
    host: str
    ok: bool
    keys: int = 0
    changed: int = 0
    octets: int = 0
    unattributed: int = 0
    skipped: int = 0
    error: str = ""


def traffic_reply_parse(data: Any) -> tuple[str, list[Row], int]:
    """(epoch, rows, malformed rows skipped) from the helper's answer; raises ValueError when
    the answer as a whole is unusable."""
    if not isinstance(data, dict):
        raise ValueError("the answer is not an object")
    epoch = data.get("epoch")
    if not isinstance(epoch, str) or not EPOCH_RE.fullmatch(epoch):
        raise ValueError("the answer has no valid epoch")
    sets = data.get("sets")
    if not isinstance(sets, dict):
        raise ValueError("the answer has no sets")
    rows: list[Row] = []
    skipped = 0
    for name, items in sets.items():
        if name not in ACCT_SETS or not isinstance(items, list):
            skipped += 1
            continue
        kind = ACCT_SETS[name][1]
        for item in items:
            try:
                key, packets, octets = item
                address = ipaddress.ip_address(key)
                if (address.version == 4) != (kind == "4"):
                    raise ValueError(key)
                if kind == "net" and int(address) & (2**64 - 1):
                    raise ValueError(key)
                if not (type(packets) is int and type(octets) is int):
                    raise ValueError(item)
                if not (0 <= packets <= MAX_COUNT and 0 <= octets <= MAX_COUNT):
                    raise ValueError(item)
            except (TypeError, ValueError):
                skipped += 1
                continue
            rows.append(Row(name, str(address), packets, octets))
    return epoch, rows, skipped


def _owners() -> tuple[
    dict[str, tuple[int, int]], dict[int, tuple[int, int]], dict[str, tuple[int, int]]
]:
    """Who holds each address now: device IPv4 -> (member, device), /64 -> (member, device or
    0 when the member has several devices there), device IPv6 -> (member, device)."""
    by4: dict[str, tuple[int, int]] = {}
    by6: dict[str, tuple[int, int]] = {}
    nets: dict[int, tuple[int, int]] = {}
    for device_id, member_id, ipv4, ipv6 in Device.objects.values_list(
        "id", "member_id", "ipv4", "ipv6"
    ).iterator(chunk_size=5000):
        if ipv4:
            by4[str(ipv4)] = (member_id, device_id)
        if ipv6:
            address = ipaddress.IPv6Address(str(ipv6))
            by6[str(address)] = (member_id, device_id)
            prefix = int(address) >> 64
            held = nets.get(prefix)
            if held is None:
                nets[prefix] = (member_id, device_id)
            elif held[0] == member_id and held[1] != device_id:
                nets[prefix] = (member_id, 0)  # several devices of one member: the member
    return by4, nets, by6


def hour_start(moment: dt.datetime) -> dt.datetime:
    return moment.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)


UPSERT = """
INSERT INTO traffic_trafficbucket
    (member_id, device_id, site_id, start, span, bytes_in, bytes_out, packets_in, packets_out)
SELECT * FROM unnest(%s::int[], %s::int[], %s::int[], %s::timestamptz[], %s::varchar[],
                     %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[])
ON CONFLICT (member_id, device_id, site_id, start, span) DO UPDATE SET
    bytes_in = traffic_trafficbucket.bytes_in + EXCLUDED.bytes_in,
    bytes_out = traffic_trafficbucket.bytes_out + EXCLUDED.bytes_out,
    packets_in = traffic_trafficbucket.packets_in + EXCLUDED.packets_in,
    packets_out = traffic_trafficbucket.packets_out + EXCLUDED.packets_out
"""


COUNTERS = """
INSERT INTO traffic_trafficcounter (host_id, set_name, key, epoch, packets, octets, seen_at)
SELECT %s, s, k, %s, p, o, %s FROM unnest(%s::varchar[], %s::varchar[], %s::bigint[], %s::bigint[])
    AS r(s, k, p, o)
ON CONFLICT (host_id, set_name, key) DO UPDATE SET
    epoch = EXCLUDED.epoch, packets = EXCLUDED.packets, octets = EXCLUDED.octets,
    seen_at = EXCLUDED.seen_at
"""


def _save_counters(host: FirewallHost, epoch: str, rows: list[Row], now: dt.datetime) -> None:
    """The host's new totals (one statement: no model instance per key)."""
    if not rows:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            COUNTERS,
            [
                host.pk, epoch, now,
                [r.set_name for r in rows], [r.key for r in rows],
                [r.packets for r in rows], [r.octets for r in rows],
            ],
        )  # fmt: skip


def _add_buckets(buckets: dict[tuple[int, int, int, dt.datetime, str], list[int]]) -> None:
    if not buckets:
        return
    columns: list[list[Any]] = [[] for _ in range(9)]
    for (member_id, device_id, site_id, start, span), (bi, bo, pi, po) in buckets.items():
        for column, value in zip(
            columns, (member_id, device_id, site_id, start, span, bi, bo, pi, po), strict=True
        ):
            column.append(value)
    with connection.cursor() as cursor:
        cursor.execute(UPSERT, columns)


def traffic_store(
    *, host: FirewallHost, epoch: str, rows: list[Row], now: dt.datetime | None = None
) -> TrafficOutcome:
    """Store one reading of a host: the differences to its last reading go into the member's
    bucket of the current hour. One transaction; readings of one host are serialised."""
    now = now or timezone.now()
    start = hour_start(now)
    with transaction.atomic():
        FirewallHost.objects.select_for_update().filter(pk=host.pk).first()
        last = {
            (s, k): (e, p, o)
            for s, k, e, p, o in TrafficCounter.objects.filter(host=host).values_list(
                "set_name", "key", "epoch", "packets", "octets"
            )
        }
        by4, nets, by6 = _owners()
        buckets: dict[tuple[int, int, int, dt.datetime, str], list[int]] = defaultdict(
            lambda: [0, 0, 0, 0]
        )
        changed: list[Row] = []
        total = unattributed = 0
        for row in rows:
            before = last.get((row.set_name, row.key))
            if before is not None and before[0] == epoch and row.octets >= before[2]:
                d_packets, d_octets = max(row.packets - before[1], 0), row.octets - before[2]
            else:  # new key, new epoch, or the host's counter started over
                d_packets, d_octets = row.packets, row.octets
            if before is not None and before == (epoch, row.packets, row.octets):
                continue
            changed.append(row)
            if not d_octets and not d_packets:
                continue
            direction, kind = ACCT_SETS[row.set_name]
            if kind == "4":
                owner = by4.get(row.key)
            elif kind == "net":
                owner = nets.get(int(ipaddress.IPv6Address(row.key)) >> 64)
            else:
                owner = by6.get(row.key)
            total += d_octets
            if owner is None:
                unattributed += d_octets
                continue
            cell = buckets[(owner[0], owner[1], host.site_id, start, Span.HOUR.value)]
            if direction == "in":
                cell[0] += d_octets
                cell[2] += d_packets
            else:
                cell[1] += d_octets
                cell[3] += d_packets
        _save_counters(host, epoch, changed, now)
        _add_buckets(buckets)
    return TrafficOutcome(
        host.name, True, keys=len(rows), changed=len(changed), octets=total,
        unattributed=unattributed,
    )  # fmt: skip


def host_traffic_collect(*, host: FirewallHost, now: dt.datetime | None = None) -> TrafficOutcome:
    try:
        with session_for(host) as session:
            reply = session.call("traffic", timeout=180)
    except FirewallUnreachable as exc:
        return TrafficOutcome(host.name, False, error=str(exc))
    if not reply.ok:
        return TrafficOutcome(host.name, False, error=reply.message)
    try:
        epoch, rows, skipped = traffic_reply_parse(reply.data)
    except ValueError as exc:
        return TrafficOutcome(host.name, False, error=f"unusable answer: {exc}")
    outcome = traffic_store(host=host, epoch=epoch, rows=rows, now=now)
    if skipped:
        outcome = TrafficOutcome(**{**outcome.__dict__, "skipped": skipped})
    return outcome


def traffic_collect(*, now: dt.datetime | None = None) -> list[TrafficOutcome]:
    """One reading of every enabled host of a site."""
    outcomes = []
    hosts = FirewallHost.objects.filter(enabled=True, site__isnull=False).order_by("name")
    for host in hosts:
        outcome = host_traffic_collect(host=host, now=now)
        if not outcome.ok:
            log.warning("traffic.collect_failed", host=host.name, error=outcome.error[:300])
        outcomes.append(outcome)
    return outcomes


ROLLUP = """
WITH moved AS (
    DELETE FROM traffic_trafficbucket
    WHERE span = 'h' AND start < %(before)s
    RETURNING member_id, device_id, site_id, start, bytes_in, bytes_out, packets_in, packets_out
)
INSERT INTO traffic_trafficbucket
    (member_id, device_id, site_id, start, span, bytes_in, bytes_out, packets_in, packets_out)
SELECT member_id, device_id, site_id,
       (date_trunc('day', start AT TIME ZONE %(zone)s)) AT TIME ZONE %(zone)s, 'd',
       sum(bytes_in), sum(bytes_out), sum(packets_in), sum(packets_out)
FROM moved
GROUP BY 1, 2, 3, 4
ON CONFLICT (member_id, device_id, site_id, start, span) DO UPDATE SET
    bytes_in = traffic_trafficbucket.bytes_in + EXCLUDED.bytes_in,
    bytes_out = traffic_trafficbucket.bytes_out + EXCLUDED.bytes_out,
    packets_in = traffic_trafficbucket.packets_in + EXCLUDED.packets_in,
    packets_out = traffic_trafficbucket.packets_out + EXCLUDED.packets_out
"""


@dataclass(frozen=True)
class RollupOutcome:
    rolled_up: int
    deleted: int


def traffic_rollup(*, now: dt.datetime | None = None) -> RollupOutcome:
    """Hours older than PORTAL_TRAFFIC_HOURLY_DAYS become days (local days, whole days only:
    the cut is a local midnight); everything older than PORTAL_TRAFFIC_KEEP_DAYS goes."""
    now = now or timezone.now()
    zone = timezone.get_current_timezone()
    local = now.astimezone(zone)
    cut = (local - dt.timedelta(days=settings.PORTAL_TRAFFIC_HOURLY_DAYS)).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    keep = now - dt.timedelta(days=settings.PORTAL_TRAFFIC_KEEP_DAYS)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(ROLLUP, {"before": cut, "zone": str(zone)})
        rolled = cursor.rowcount
        deleted, _ = TrafficBucket.objects.filter(start__lt=keep).delete()
        TrafficCounter.objects.filter(seen_at__lt=keep).delete()
    return RollupOutcome(rolled, deleted)


def traffic_summaries_notify(*, now: dt.datetime | None = None) -> int:
    """In the first two days of a month: every member with traffic in the month before gets
    a notice with its totals (mailed only to those who turned the monthly summary on). Once per
    member and month (the notice's source); returns how many notices were asked for."""

    now = now or timezone.now()
    zone = timezone.get_current_timezone()
    local = now.astimezone(zone)
    if local.day > 2:
        return 0
    month_start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    previous = (month_start - dt.timedelta(days=1)).replace(day=1)
    label = f"{previous:%Y-%m}"
    rows = (
        TrafficBucket.objects.filter(start__gte=previous, start__lt=month_start)
        .values("member_id")
        .annotate(bytes_in=Sum("bytes_in"), bytes_out=Sum("bytes_out"))
    )
    notices = [
        Notice(
            member_id=row["member_id"],
            kind=NoticeKind.TRAFFIC,
            source=f"traffic:{label}",
            params={"month": label, "bytes_in": row["bytes_in"], "bytes_out": row["bytes_out"]},
            created_at=now,
        )
        for row in rows
        if row["bytes_in"] or row["bytes_out"]
    ]
    Notice.objects.bulk_create(notices, batch_size=2000, ignore_conflicts=True)
    if notices:
        _mail_soon()
    return len(notices)
