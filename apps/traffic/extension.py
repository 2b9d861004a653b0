"""Traffic's part in a membership (apps/members/extensions.py): the buckets kept, in the
member's data download."""

from __future__ import annotations

from typing import Any

from apps.members.extensions import MemberExtension
from apps.members.models import Member
from apps.members.privacy import plain
from apps.traffic.models import TrafficBucket


def _traffic(member: Member) -> list[dict[str, Any]]:
    """The traffic buckets kept (hours of the last week, days before; docs/traffic.md)."""
    return [
        {**row, "start": plain(row["start"])}
        for row in TrafficBucket.objects.filter(member=member)
        .order_by("start", "device_id")
        .values("start", "span", "device_id", "bytes_in", "bytes_out", "packets_in", "packets_out")
    ]


class TrafficMemberExtension(MemberExtension):
    """The member's traffic buckets."""

    def member_data(self, *, member: Member) -> dict[str, Any]:
        return {"traffic": _traffic(member)}
