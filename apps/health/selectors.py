"""Reads of health data for the status screens."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import OuterRef, Subquery

from apps.firewall.models import FirewallHost
from apps.health.models import HostHealthSample
from apps.health.services import HealthWarning, host_warnings


@dataclass
class HostState:
    """A host with its newest health sample and the warnings it raises."""

    host: FirewallHost
    sample: HostHealthSample | None
    warnings: list[HealthWarning] = field(default_factory=list)

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
    states = []
    for host in hosts:
        sample = samples.get(host.newest_sample_id)
        states.append(HostState(host, sample, host_warnings(host=host, sample=sample)))
    return states


def host_health_series(*, host: FirewallHost, limit: int = 120) -> dict[str, list[Any]]:
    """The newest `limit` samples of a host as chart columns (oldest first)."""
    rows = list(
        HostHealthSample.objects.filter(host=host).values_list(
            "at", "latency_ms", "conntrack_count", "conntrack_max", "softirq_max_share", "load1"
        )[:limit]
    )
    rows.reverse()
    return {
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
