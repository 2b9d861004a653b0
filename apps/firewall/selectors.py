"""Reads of the firewall app (the DB -> compiler bridge joins this module with its issue)."""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from apps.firewall.models import FirewallHost, PushLogEntry, RuleSetVersion
from workers import ruleset as rs

DIFF_MAX_LINES = 200_000


def host_versions(*, host: FirewallHost) -> QuerySet[RuleSetVersion]:
    """A host's stored versions, newest first, without their (large) texts."""
    return RuleSetVersion.objects.filter(host=host).defer("nft_text", "tc_text")


def host_push_log(*, host: FirewallHost) -> QuerySet[PushLogEntry]:
    """A host's push steps, newest first."""
    return (
        PushLogEntry.objects.filter(host=host)
        .select_related("version")
        .defer("version__nft_text", "version__tc_text")
    )


def version_diff(*, old: RuleSetVersion, new: RuleSetVersion) -> Iterator[str] | None:
    """A unified diff of two versions' nft text, or None when they are too large to diff here."""
    a, b = old.nft_text.splitlines(), new.nft_text.splitlines()
    if len(a) + len(b) > DIFF_MAX_LINES:
        return None
    return difflib.unified_diff(a, b, f"#{old.pk}", f"#{new.pk}", lineterm="", n=2)


# --------------------------------------------------------------------------------------------
# The only bridge from the database to the compiler: a few queries -> typed Snapshot values.
# --------------------------------------------------------------------------------------------

NETWORKED_STATUSES = ("active", "test")  # MemberStatus values that reach the Internet


@dataclass(frozen=True)
class SnapshotData:
    """What every host's snapshot shares: read once per compile."""

    policy: rs.Policy
    members: tuple[rs.Member, ...]
    private_networks: tuple[str, ...]
    public_networks: tuple[str, ...]
    taken_at: datetime


def snapshot_data_read() -> SnapshotData:
    """Read policy, members, addresses and devices in a handful of queries (one snapshot time)."""
    from apps.members.models import Member
    from apps.network.models import Device, PublicPool, Subnet

    taken_at = timezone.now()
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost:  # one consistent view of all tables while they change underneath
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        member_rows = list(
            Member.objects.filter(status__in=NETWORKED_STATUSES).values_list(
                "id", "public_ipv4__address", "room__ipv6_prefix"
            )
        )
        devices: dict[int, list[rs.Device]] = defaultdict(list)
        for member_id, device_id, ipv4, ipv6 in Device.objects.filter(
            member__status__in=NETWORKED_STATUSES
        ).values_list("member_id", "id", "ipv4", "ipv6"):
            devices[member_id].append(
                rs.Device(id=device_id, ipv4=ipv4, ipv6=(ipv6,) if ipv6 else ())
            )
        private = tuple(Subnet.objects.filter(family=4).values_list("network", flat=True))
        public = tuple(PublicPool.objects.values_list("network", flat=True))
    members = tuple(
        rs.Member(
            id=member_id,
            public_ipv4=public_ipv4,
            devices=tuple(devices.get(member_id, ())),
            ipv6_prefixes=(prefix,) if prefix else (),
        )
        for member_id, public_ipv4, prefix in member_rows
    )
    policy = rs.Policy(management_networks=tuple(settings.PORTAL_MANAGEMENT_NETWORKS))
    return SnapshotData(policy, members, private, public, taken_at)


def _interfaces(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def firewall_snapshot_build(*, host: FirewallHost, data: SnapshotData | None = None) -> rs.Snapshot:
    """The compiler's input for `host` (raises SnapshotError naming any inconsistent row)."""
    data = data or snapshot_data_read()
    return rs.Snapshot(
        policy=data.policy,
        host=rs.Host(
            name=host.name,
            uplink_interfaces=_interfaces(host.uplink_interfaces),
            member_interfaces=_interfaces(host.member_interfaces),
            private_networks=data.private_networks,
            public_networks=data.public_networks,
        ),
        members=data.members,
    )
