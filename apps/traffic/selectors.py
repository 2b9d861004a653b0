"""What members and staff read: a member's totals and daily series, the top talkers of an hour."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db.models import F, Q, Sum
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from apps.traffic.models import Span, TrafficBucket

PERIODS = (7, 30, 90)


@dataclass(frozen=True)
class Day:
    day: dt.date
    bytes_in: int
    bytes_out: int


def _sums(qs: Any) -> dict[str, int]:
    got = qs.aggregate(
        bytes_in=Coalesce(Sum("bytes_in"), 0), bytes_out=Coalesce(Sum("bytes_out"), 0)
    )
    return {"bytes_in": got["bytes_in"], "bytes_out": got["bytes_out"]}


def _day_sums(rows: Any) -> dict[str, int]:
    rows = list(rows)
    return {key: sum(row[key] or 0 for row in rows) for key in ("bytes_in", "bytes_out")}


def member_traffic(
    *, member: Any, days: int = 30, now: dt.datetime | None = None
) -> dict[str, Any]:
    """This month's totals (local month) and one row per local day of the last `days` days."""
    zone = timezone.get_current_timezone()
    local = (now or timezone.now()).astimezone(zone)
    month_start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    first_day = local.date() - dt.timedelta(days=days - 1)
    since = dt.datetime.combine(first_day, dt.time(), tzinfo=zone)
    mine = TrafficBucket.objects.filter(member=member)
    per_day = {
        row["day"]: row
        for row in mine.filter(start__gte=since)
        .annotate(day=TruncDate("start", tzinfo=zone))
        .values("day")
        .annotate(bytes_in=Sum("bytes_in"), bytes_out=Sum("bytes_out"))
    }
    series = []
    for i in range(days):
        day = first_day + dt.timedelta(days=i)
        row = per_day.get(day) or {}
        series.append(Day(day, row.get("bytes_in") or 0, row.get("bytes_out") or 0))
    # The period's totals are the days' sums; the month's too when it began inside the period
    # (two queries fewer on every dashboard).
    if month_start.date() >= first_day:
        month = _day_sums(row for day, row in per_day.items() if day >= month_start.date())
    else:
        month = _sums(mine.filter(start__gte=month_start))
    return {
        "month": month,
        "month_start": month_start,
        "period": _day_sums(per_day.values()),
        "days": days,
        "series": series,
    }


def top_talkers(
    *, hour: dt.datetime, site: Any = None, building: Any = None, limit: int = 20
) -> dict[str, Any]:
    """The members with the most traffic in one hour (their hourly buckets; once an hour is
    rolled up, the whole local day instead: `span` says which)."""
    start = hour.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
    qs = TrafficBucket.objects.filter(span=Span.HOUR, start=start)
    span = Span.HOUR
    if not qs.exists():
        zone = timezone.get_current_timezone()
        day = hour.astimezone(zone).replace(hour=0, minute=0, second=0, microsecond=0)
        day_qs = TrafficBucket.objects.filter(span=Span.DAY, start=day)
        if day_qs.exists():
            qs, span, start = day_qs, Span.DAY, day
    if site is not None:
        qs = qs.filter(site=site)
    if building is not None:
        qs = qs.filter(member__room__building=building)
    rows = (
        qs.values(
            "member_id",
            "member__user__first_name",
            "member__user__last_name",
            "member__user__username",
            "member__room__label",
        )
        .annotate(bytes_in=Sum("bytes_in"), bytes_out=Sum("bytes_out"))
        .annotate(total=F("bytes_in") + F("bytes_out"))
        .order_by("-total", "member_id")[:limit]
    )
    totals = _sums(qs)
    return {
        "rows": list(rows),
        "span": span,
        "start": start,
        "total": totals["bytes_in"] + totals["bytes_out"],
        **totals,
        "members": qs.exclude(Q(bytes_in=0) & Q(bytes_out=0))
        .values("member_id")
        .distinct()
        .count(),
    }
