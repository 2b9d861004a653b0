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
import socket
from dataclasses import dataclass
from typing import Any

import structlog
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum
from django.utils import timezone

from apps.firewall.models import FirewallHost
from apps.firewall.transport import FirewallUnreachable, session_for
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


_FAMILY = {"4": socket.AF_INET, "net": socket.AF_INET6, "6": socket.AF_INET6}
_HOST_BITS = bytes(8)


def traffic_reply_parse(data: Any) -> tuple[str, list[Row], int]:
    """(epoch, rows, malformed rows skipped) from the helper's answer; raises ValueError when
    the answer as a whole is unusable.

    A key is an address of the set's family (a /64 key with no host bits), written back in its
    canonical text (inet_pton/inet_ntop in C: a fifth of ipaddress's time at 800,000 keys)."""
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
    pton, ntop = socket.inet_pton, socket.inet_ntop
    for name, items in sets.items():
        if name not in ACCT_SETS or not isinstance(items, list):
            skipped += 1
            continue
        kind = ACCT_SETS[name][1]
        family = _FAMILY[kind]
        for item in items:
            try:
                key, packets, octets = item
                raw = pton(family, key)
                if kind == "net" and raw[8:] != _HOST_BITS:
                    raise ValueError(key)
                if not (type(packets) is int and type(octets) is int):
                    raise ValueError(item)
                if not (0 <= packets <= MAX_COUNT and 0 <= octets <= MAX_COUNT):
                    raise ValueError(item)
            except (TypeError, ValueError, OSError):
                skipped += 1
                continue
            text = ntop(family, raw)
            if family == socket.AF_INET6 and "." in text:  # ::ffff:a.b.c.d: ipaddress's spelling
                text = str(ipaddress.IPv6Address(raw))
            rows.append(Row(name, text, packets, octets))
    return epoch, rows, skipped


def hour_start(moment: dt.datetime) -> dt.datetime:
    return moment.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)


# One reading is stored set-based in PostgreSQL (docs/traffic.md, "Storing a reading"): its rows
# go into a temporary staging table with COPY; one statement joins them with the host's last
# totals and with the devices that hold each key now (the difference and its owner per key); the
# differences are summed into the hour's buckets and the new totals replace the old ones with
# one INSERT ... ON CONFLICT each. No Python object per key beyond the COPY.
# The reading's sorts and hashes in memory (with the default 4 MB work_mem, 40 MB sorts and
# 16-batch hash joins spilled to disk at 100,000 members); no JIT compile for statements that
# run once per reading. For the transaction only.
STORE_SETTINGS = ("SET LOCAL work_mem = '256MB'", "SET LOCAL jit = off")

STAGE = """
CREATE TEMPORARY TABLE traffic_reading (
    set_name varchar(16) NOT NULL, key varchar(48) NOT NULL, packets bigint NOT NULL,
    octets bigint NOT NULL
) ON COMMIT DROP
"""

# Owners, as a member sees them: a device IPv4 or a device IPv6 (a shared /64's address) is its
# device's; a member-owned /64 is the member's one device there, or the member (device 0) when
# it holds several. A key nobody holds now goes to its counter's last owner, while that member
# exists (a device removed since the last reading: the host carried what its element counted). Devices of another member in the same /64 (it cannot happen: a /64 is one
# member's) do not change the owner, who is the member of the /64's first device.
# Only the devices the reading names are grouped and joined (filtered by the staging table
# itself, whose statistics ANALYZE has just taken, so the planner sees how many keys there are
# and hash-joins): a site's host reads its site's keys, and grouping and hashing every device
# of the portal cost each of the ten hosts of 5 sites x 20,000 members about half a second.
DELTAS = """
CREATE TEMPORARY TABLE traffic_delta ON COMMIT DROP AS
WITH reading AS (
    SELECT DISTINCT ON (set_name, key) set_name, key, packets, octets
    FROM traffic_reading ORDER BY set_name, key
),
nets AS (
    SELECT DISTINCT set_masklen(key::inet, 64) AS net FROM traffic_reading
    WHERE set_name IN ('acct6n_in', 'acct6n_out')
),
net_owner AS (
    SELECT DISTINCT ON (net) net, member_id, CASE WHEN held > 1 THEN 0 ELSE first END AS device_id
    FROM (
        SELECT network(set_masklen(ipv6, 64)) AS net, member_id, count(*) AS held, min(id) AS first
        FROM network_device
        WHERE ipv6 IS NOT NULL AND network(set_masklen(ipv6, 64)) IN (SELECT net FROM nets)
        GROUP BY 1, 2
    ) AS per_member
    ORDER BY net, first
),
dev4 AS (
    SELECT id, member_id, ipv4 FROM network_device
    WHERE ipv4 IN (SELECT key::inet FROM traffic_reading WHERE set_name IN ('acct4_in', 'acct4_out'))
),
dev6 AS (
    SELECT id, member_id, ipv6 FROM network_device
    WHERE ipv6 IN (SELECT key::inet FROM traffic_reading WHERE set_name IN ('acct6_in', 'acct6_out'))
),
compared AS (
    SELECT r.set_name, r.key, r.packets, r.octets, r.key::inet AS address,
           CASE WHEN r.set_name IN ('acct6n_in', 'acct6n_out')
                THEN set_masklen(r.key::inet, 64) END AS net,
           c.id IS NOT NULL AND c.epoch = %(epoch)s AND r.octets >= c.octets AS continues,
           c.id AS counter_id, c.packets AS last_packets, c.octets AS last_octets,
           c.last_member_id AS last_member, c.last_device_id AS last_device,
           c.id IS NOT NULL AND c.epoch = %(epoch)s AND c.packets = r.packets
               AND c.octets = r.octets AS same
    FROM reading r
    LEFT JOIN traffic_trafficcounter c
        ON c.host_id = %(host)s AND c.set_name = r.set_name AND c.key = r.key
)
SELECT x.set_name, x.key, x.packets, x.octets, x.counter_id,
       CASE WHEN x.continues THEN greatest(x.packets - x.last_packets, 0)
            ELSE x.packets END AS d_packets,
       CASE WHEN x.continues THEN x.octets - x.last_octets ELSE x.octets END AS d_octets,
       right(x.set_name, 3) = '_in' AS inbound,
       coalesce(d4.member_id, d6.member_id, n.member_id, lm.id) AS member_id,
       CASE WHEN coalesce(d4.member_id, d6.member_id, n.member_id) IS NOT NULL
            THEN coalesce(d4.id, d6.id, n.device_id)
            WHEN lm.id IS NOT NULL THEN x.last_device END AS device_id
FROM compared x
LEFT JOIN dev4 d4
    ON x.set_name IN ('acct4_in', 'acct4_out') AND d4.ipv4 = x.address
LEFT JOIN dev6 d6
    ON x.set_name IN ('acct6_in', 'acct6_out') AND d6.ipv6 = x.address
LEFT JOIN net_owner n
    ON x.set_name IN ('acct6n_in', 'acct6n_out') AND n.net = x.net
LEFT JOIN members_member lm
    ON x.last_member IS NOT NULL AND lm.id = x.last_member
    AND d4.id IS NULL AND d6.id IS NULL AND n.net IS NULL
WHERE NOT x.same
"""

# The hour's sums per owner, and the bucket each one adds to when it exists already: those are
# updated by id (a join, and HOT updates: the summed columns are in no index), the others
# inserted (ON CONFLICT: the pair's other host may add the same bucket at the same moment).
SUMS = """
CREATE TEMPORARY TABLE traffic_sum ON COMMIT DROP AS
SELECT s.*, b.id AS bucket_id FROM (
    SELECT member_id, device_id,
           coalesce(sum(d_octets) FILTER (WHERE inbound), 0) AS bytes_in,
           coalesce(sum(d_octets) FILTER (WHERE NOT inbound), 0) AS bytes_out,
           coalesce(sum(d_packets) FILTER (WHERE inbound), 0) AS packets_in,
           coalesce(sum(d_packets) FILTER (WHERE NOT inbound), 0) AS packets_out
    FROM traffic_delta
    WHERE member_id IS NOT NULL AND (d_octets <> 0 OR d_packets <> 0)
    GROUP BY member_id, device_id
) AS s
LEFT JOIN traffic_trafficbucket b
    ON b.member_id = s.member_id AND b.device_id = s.device_id AND b.site_id = %(site)s
    AND b.start = %(start)s AND b.span = %(span)s
"""

BUCKETS_ADD = """
UPDATE traffic_trafficbucket b SET
    bytes_in = b.bytes_in + s.bytes_in, bytes_out = b.bytes_out + s.bytes_out,
    packets_in = b.packets_in + s.packets_in, packets_out = b.packets_out + s.packets_out
FROM traffic_sum s WHERE b.id = s.bucket_id
"""

BUCKETS_NEW = """
INSERT INTO traffic_trafficbucket
    (member_id, device_id, site_id, start, span, bytes_in, bytes_out, packets_in, packets_out)
SELECT member_id, device_id, %(site)s, %(start)s, %(span)s,
       bytes_in, bytes_out, packets_in, packets_out
FROM traffic_sum WHERE bucket_id IS NULL
ON CONFLICT (member_id, device_id, site_id, start, span) DO UPDATE SET
    bytes_in = traffic_trafficbucket.bytes_in + EXCLUDED.bytes_in,
    bytes_out = traffic_trafficbucket.bytes_out + EXCLUDED.bytes_out,
    packets_in = traffic_trafficbucket.packets_in + EXCLUDED.packets_in,
    packets_out = traffic_trafficbucket.packets_out + EXCLUDED.packets_out
"""

# The host's new totals: known keys updated by id, new keys inserted (the host's row lock
# serialises its readings, so no other reading inserts the same key meanwhile).
COUNTERS_SET = """
UPDATE traffic_trafficcounter c SET
    epoch = %(epoch)s, packets = d.packets, octets = d.octets, seen_at = %(now)s,
    last_member_id = d.member_id, last_device_id = d.device_id
FROM traffic_delta d WHERE c.id = d.counter_id
"""

COUNTERS_NEW = """
INSERT INTO traffic_trafficcounter
    (host_id, set_name, key, epoch, packets, octets, seen_at, last_member_id, last_device_id)
SELECT %(host)s, set_name, key, %(epoch)s, packets, octets, %(now)s, member_id, device_id
FROM traffic_delta
WHERE counter_id IS NULL
"""

OUTCOME = """
SELECT count(*), coalesce(sum(d_octets), 0),
       coalesce(sum(d_octets) FILTER (WHERE member_id IS NULL), 0)
FROM traffic_delta
"""


def traffic_store(
    *, host: FirewallHost, epoch: str, rows: list[Row], now: dt.datetime | None = None
) -> TrafficOutcome:
    """Store one reading of a host: the differences to its last reading go into the member's
    bucket of the current hour. One transaction; readings of one host are serialised."""
    now = now or timezone.now()
    params = {
        "host": host.pk, "epoch": epoch, "now": now, "site": host.site_id,
        "start": hour_start(now), "span": Span.HOUR.value,
    }  # fmt: skip
    with transaction.atomic():
        FirewallHost.objects.select_for_update().filter(pk=host.pk).first()
        with connection.cursor() as cursor:
            for setting in STORE_SETTINGS:
                cursor.execute(setting)
            cursor.execute(STAGE)
            with cursor.cursor.copy(
                "COPY traffic_reading (set_name, key, packets, octets) FROM STDIN"
            ) as copy:
                for row in rows:
                    copy.write_row((row.set_name, row.key, row.packets, row.octets))
            cursor.execute("ANALYZE traffic_reading")
            cursor.execute(DELTAS, params)
            cursor.execute(SUMS, params)
            cursor.execute(BUCKETS_ADD, params)
            cursor.execute(BUCKETS_NEW, params)
            cursor.execute(COUNTERS_SET, params)
            cursor.execute(COUNTERS_NEW, params)
            cursor.execute(OUTCOME)
            changed, total, unattributed = cursor.fetchone()
            cursor.execute("DROP TABLE traffic_reading, traffic_delta, traffic_sum")
    return TrafficOutcome(
        host.name, True, keys=len(rows), changed=changed, octets=int(total),
        unattributed=int(unattributed),
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
