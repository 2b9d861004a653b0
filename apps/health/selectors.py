"""Reads of health data for the status screens."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import OuterRef, Subquery

from apps.firewall.models import FirewallHost
from apps.health.models import HostHealthSample
from apps.health.services import HealthWarning, host_warnings, pair_warnings, vrrp_roles
from apps.members.models import Member
from apps.network.models import Device, PublicAddress


@dataclass
class HostState:
    """A host with its newest health sample and the warnings it raises."""

    host: FirewallHost
    sample: HostHealthSample | None
    warnings: list[HealthWarning] = field(default_factory=list)
    roles: dict[str, str] = field(default_factory=dict)  # VRRP state per family, when a pair

    @property
    def primary_for(self) -> list[str]:
        """The families this host is primary for ("IPv4", "IPv6")."""
        return [
            {"ipv4": "IPv4", "ipv6": "IPv6"}[f]
            for f, s in sorted(self.roles.items())
            if s == "MASTER"
        ]

    @property
    def ok(self) -> bool:
        return not self.warnings


def firewall_host_states() -> list[HostState]:
    """Every host with its newest sample, in two queries whatever the number of hosts."""
    newest = (
        HostHealthSample.objects.filter(host=OuterRef("pk")).order_by("-at", "-id").values("pk")[:1]
    )
    hosts = list(
        FirewallHost.objects.annotate(newest_sample_id=Subquery(newest))
        .select_related("site")
        .prefetch_related("site__buildings")
    )
    samples = HostHealthSample.objects.in_bulk(
        [h.newest_sample_id for h in hosts if h.newest_sample_id]
    )
    by_host = {h.pk: samples.get(h.newest_sample_id) for h in hosts}
    pairs: dict[int, list[FirewallHost]] = {}
    for host in hosts:
        if host.enabled and host.sync_interface:
            pairs.setdefault(host.site_id, []).append(host)
    states = []
    for host in hosts:
        sample = by_host[host.pk]
        warnings = host_warnings(host=host, sample=sample)
        if host in pairs.get(host.site_id, ()):
            warnings += pair_warnings(by_host, pairs[host.site_id])
        states.append(HostState(host, sample, warnings, vrrp_roles(sample)))
    return states


def host_health_series(*, host: FirewallHost, limit: int = 120) -> dict[str, list[Any]]:
    """The newest `limit` samples of a host as chart columns (oldest first)."""
    rows = list(
        HostHealthSample.objects.filter(host=host).values_list(
            "at", "latency_ms", "conntrack_count", "conntrack_max", "softirq_max_share", "load1"
        )[:limit]
    )
    rows.reverse()
    stats = list(
        HostHealthSample.objects.filter(host=host).values_list("conntrack_stats", flat=True)[:limit]
    )
    stats.reverse()
    dropped: list[int | None] = []
    for before, now in zip([None, *stats], stats, strict=False):
        keys = ("drop", "early_drop", "insert_failed")
        if not before or not now or not all(k in before and k in now for k in keys):
            dropped.append(None)
        else:  # a restart resets the counters: no negative drops
            dropped.append(max(0, sum(now[k] - before[k] for k in keys)))
    return {
        "conntrack_drops": dropped,
        "t": [int(at.timestamp()) for at, *_ in rows],
        "latency_ms": [lat for _, lat, *_ in rows],
        "conntrack_pct": [
            round(100 * count / maximum, 2) if count is not None and maximum else None
            for _, _, count, maximum, _, _ in rows
        ],
        "softirq_pct": [
            round(100 * share, 1) if share is not None else None for *_, share, _ in rows
        ],
        "load1": [load for *_, load in rows],
    }


def failed_over_families(states: list[HostState]) -> list[str]:
    """The families ("IPv4", "IPv6") whose traffic runs on the backup of its pair now: the
    primary VRRP role is held by a host that is not the site's designated primary."""
    pairs: dict[int, list[HostState]] = {}
    for state in states:
        if state.host.enabled and state.host.sync_interface:
            pairs.setdefault(state.host.site_id, []).append(state)
    moved = []
    for members in pairs.values():
        if len(members) != 2:
            continue
        members.sort(key=lambda st: (st.host.rollout_order, st.host.name))
        site = members[0].host.site
        designated = {
            "ipv4": site.ipv4_primary_id or members[0].host.pk,
            "ipv6": site.ipv6_primary_id or members[1].host.pk,
        }
        for family, label in (("ipv4", "IPv4"), ("ipv6", "IPv6")):
            holders = [st.host.pk for st in members if st.roles.get(family) == "MASTER"]
            if holders and designated[family] not in holders and label not in moved:
                moved.append(label)
    return moved


# Warnings that only the pair together raises: every host of the pair carries them.
PAIR_CODES = frozenset({"no-primary", "both-primary", "sync-diverges"})


def public_problem_count(states: list[HostState]) -> int:
    """How many firewalls the public status page says report a problem: a pair's warning
    counts once (not once per host), and an instance in FAULT whose family another host of the
    pair carries as primary is a takeover that kept traffic flowing: information, shown as
    "running on the backup", not a problem."""
    pairs: dict[int, list[HostState]] = {}
    for state in states:
        if state.host.enabled and state.host.sync_interface:
            pairs.setdefault(state.host.site_id, []).append(state)
    problems = 0
    for state in states:
        peers = [st for st in pairs.get(state.host.site_id, []) if st is not state]
        carried = all(
            any(peer.roles.get(family) == "MASTER" for peer in peers)
            for family, role in state.roles.items()
            if role == "FAULT"
        )
        own = [
            w
            for w in state.warnings
            if w.code not in PAIR_CODES and not (w.code == "vrrp-fault" and carried)
        ]
        problems += bool(own)
    for members in pairs.values():
        problems += any(w.code in PAIR_CODES for st in members for w in st.warnings)
    return min(problems, len(states))


@dataclass
class QuotaHit:
    """A member who hit a conntrack quota: the address the firewall saw and the drops."""

    address: str
    packets: int
    member: Any = None  # apps.members.models.Member, or None when the address is unknown


def quota_hit_members(sample: HostHealthSample | None) -> list[QuotaHit]:
    """The sample's quota hits with their members (public IPv4 -> its member; a /64 -> the
    member whose devices hold addresses in it), in two queries."""
    import ipaddress

    if sample is None or not sample.quota_hits:
        return []
    hits = [
        QuotaHit(str(h.get("address", "")), int(h.get("packets") or 0)) for h in sample.quota_hits
    ]
    v4 = [h.address for h in hits if ":" not in h.address]
    owners = dict(
        PublicAddress.objects.filter(address__in=v4, member__isnull=False).values_list(
            "address", "member_id"
        )
    )
    prefixes: dict[int, str] = {}  # upper 64 bits -> the hit's address
    for h in hits:
        if ":" in h.address:
            try:
                prefixes[int(ipaddress.IPv6Address(h.address)) >> 64] = h.address
            except ValueError:
                continue
    if prefixes:  # one pass over the devices' IPv6 addresses
        for member_id, ipv6 in Device.objects.filter(ipv6__isnull=False).values_list(
            "member_id", "ipv6"
        ):
            address = prefixes.get(int(ipaddress.IPv6Address(ipv6)) >> 64)
            if address is not None:
                owners.setdefault(address, member_id)
    members = Member.objects.in_bulk(set(owners.values()))
    for h in hits:
        h.member = members.get(owners.get(h.address))
    return hits
