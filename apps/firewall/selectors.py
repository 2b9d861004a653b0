"""Reads of the firewall app (the DB -> compiler bridge joins this module with its issue)."""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q, QuerySet
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


DEFAULT_SHAPING_KBIT = (4000, 1000)  # ShapingProfile.default()'s built-in rates


def snapshot_data_read() -> SnapshotData:
    """Read policy, members, addresses, devices, forwards, openings and shaping in a handful
    of queries, from one consistent view of the database."""
    from apps.members.models import Member
    from apps.network.models import (
        BlockedPort,
        Device,
        Ipv6Opening,
        ManagementNetwork,
        PortForward,
        PublicPool,
        ShapingProfile,
        Subnet,
    )

    taken_at = timezone.now()
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost:  # one consistent view of all tables while they change underneath
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        networked = Q(member__status__in=NETWORKED_STATUSES)
        member_rows = list(
            Member.objects.filter(status__in=NETWORKED_STATUSES).values_list(
                "id",
                "status",
                "public_ipv4__address",
                "room__ipv6_prefix",
                "test_access__profile__down_kbit",
                "test_access__profile__up_kbit",
            )
        )
        devices: dict[int, list[rs.Device]] = defaultdict(list)
        for member_id, device_id, ipv4, ipv6 in Device.objects.filter(networked).values_list(
            "member_id", "id", "ipv4", "ipv6"
        ):
            devices[member_id].append(
                rs.Device(id=device_id, ipv4=ipv4, ipv6=(ipv6,) if ipv6 else ())
            )
        forwards: dict[int, list[rs.PortForward]] = defaultdict(list)
        for row in PortForward.objects.filter(
            networked, enabled=True, device__isnull=False, public_address__isnull=False
        ).values_list(
            "member_id",
            "id",
            "protocol",
            "public_first",
            "public_last",
            "device_id",
            "target_first",
            "target_last",
        ):
            member_id, fid, protocol, p1, p2, device_id, t1, t2 = row
            forwards[member_id].append(rs.PortForward(fid, protocol, (p1, p2), device_id, (t1, t2)))
        openings: dict[int, list[rs.Opening]] = defaultdict(list)
        for member_id, oid, device_id, protocol, first, last in Ipv6Opening.objects.filter(
            enabled=True, device__member__status__in=NETWORKED_STATUSES
        ).values_list(
            "device__member_id", "id", "device_id", "protocol", "port_first", "port_last"
        ):
            ports = None if first is None else (first, last)
            openings[member_id].append(rs.Opening(oid, device_id, protocol, ports))
        default_profile = (
            ShapingProfile.objects.filter(is_default=True)
            .values_list("down_kbit", "up_kbit")
            .first()
            or ShapingProfile.objects.filter(name="Test access")
            .values_list("down_kbit", "up_kbit")
            .first()
            or DEFAULT_SHAPING_KBIT
        )
        blocked = {"inbound": [], "outbound": []}
        for direction, protocol, first, last in BlockedPort.objects.values_list(
            "direction", "protocol", "first", "last"
        ):
            blocked[direction].append(rs.PortRule(protocol, (first, last)))
        management = [
            *ManagementNetwork.objects.values_list("network", flat=True),
            *settings.PORTAL_MANAGEMENT_NETWORKS,
        ]
        private = tuple(Subnet.objects.filter(family=4).values_list("network", flat=True))
        public = tuple(PublicPool.objects.values_list("network", flat=True))
    members = []
    for member_id, status, public_ipv4, prefix, down, up in member_rows:
        shaping = None
        if status == "test":
            shaping = rs.Shaping(*(down, up) if down and up else default_profile)
        members.append(
            rs.Member(
                id=member_id,
                public_ipv4=public_ipv4,
                devices=tuple(devices.get(member_id, ())),
                forwards=tuple(forwards.get(member_id, ())),
                openings=tuple(openings.get(member_id, ())),
                shaping=shaping,
                ipv6_prefixes=(prefix,) if prefix else (),
            )
        )
    policy = rs.Policy(
        management_networks=tuple(dict.fromkeys(management)),
        blocked_outbound=tuple(blocked["outbound"]),
        blocked_inbound=tuple(blocked["inbound"]),
    )
    return SnapshotData(policy, tuple(members), private, public, taken_at)


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


def live_attach(rows: Iterable[Any]) -> bool:
    """Set `row.live` (what network/partials/live_state.html and the API show) on rows with an
    `updated_at`; True while any of them is not yet live everywhere (the page keeps polling)."""
    rows = list(rows)
    states = live_states(changed_at={row.pk: row.updated_at for row in rows})
    waiting = False
    for row in rows:
        state = states[row.pk]
        failed = [h for h in state.hosts if h.state == "failed"]
        row.live = {
            "state": state.state,
            "hosts": [h.host for h in state.hosts if h.state == "live"],
            "since": state.since,
            "reason": "; ".join(f"{h.host}: {h.reason}" for h in failed),
            "per_host": [
                {"host": h.host, "state": h.state, "since": h.since, "reason": h.reason}
                for h in state.hosts
            ],
        }
        waiting |= state.state != "live"
    return waiting
