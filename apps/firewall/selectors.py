"""Reads of the firewall app (the DB -> compiler bridge joins this module with its issue)."""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

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


# --------------------------------------------------------------------------------------------
# Live state of rows (devices, forwards, openings): which hosts enforce their last change.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostLiveState:
    """One host's view of one row: live since, pending, or failed with a reason."""

    host: str
    state: str  # "live" | "pending" | "failed"
    since: datetime | None = None
    reason: str = ""


@dataclass(frozen=True)
class LiveState:
    """A row's state across every enabled host."""

    hosts: tuple[HostLiveState, ...]

    @property
    def state(self) -> str:
        states = {h.state for h in self.hosts}
        if not self.hosts:
            return "pending"
        if states == {"live"}:
            return "live"
        return "failed" if "failed" in states else "pending"

    @property
    def since(self) -> datetime | None:
        """When the last host started enforcing it (live on all since)."""
        times = [h.since for h in self.hosts if h.since]
        return max(times) if times and self.state == "live" else None


def live_states(*, changed_at: dict[Any, datetime]) -> dict[Any, LiveState]:
    """For rows last changed at `changed_at[key]`: live on which host since when (2 queries).

    A host enforces a change when the version it confirmed was compiled from a snapshot taken
    after the change; "since" is that host's first such confirmation."""
    if not changed_at:
        return {}
    hosts = list(
        FirewallHost.objects.filter(enabled=True).values(
            "pk",
            "name",
            "push_status",
            "error_reason",
            "last_push_at",
            "applied_version__snapshot_at",
        )
    )
    earliest = min(changed_at.values())
    confirms: dict[int, list[tuple[datetime, datetime]]] = defaultdict(list)
    for host_id, at, snapshot_at in (
        PushLogEntry.objects.filter(step="confirm", ok=True, at__gte=earliest)
        .order_by("at")
        .values_list("host_id", "at", "version__snapshot_at")
    ):
        if snapshot_at is not None:
            confirms[host_id].append((at, snapshot_at))
    result = {}
    for key, changed in changed_at.items():
        per_host = []
        for h in hosts:
            running = h["applied_version__snapshot_at"]
            if running is not None and running >= changed:
                since = next(
                    (at for at, snap in confirms[h["pk"]] if snap >= changed and at >= changed),
                    None,
                )
                per_host.append(HostLiveState(h["name"], "live", since))
            elif h["push_status"] in ("error", "unreachable") and (
                h["last_push_at"] and h["last_push_at"] >= changed
            ):
                per_host.append(HostLiveState(h["name"], "failed", reason=h["error_reason"]))
            else:
                per_host.append(HostLiveState(h["name"], "pending"))
        result[key] = LiveState(tuple(per_host))
    return result
