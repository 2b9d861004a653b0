"""The signals around an incident's start, so its post-mortem starts from data: per-core softirq,
conntrack count and drops, VRRP role changes (from the stored health samples) and pushes (from
the push log) of the firewalls that serve its buildings."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils.translation import gettext as _

from apps.firewall.models import FirewallHost, PushLogEntry
from apps.health.models import HostHealthSample
from apps.tickets.models import Incident

WINDOW = timedelta(minutes=15)
MAX_ROWS = 300
DROP_KEYS = ("drop", "early_drop", "insert_failed")


@dataclass(frozen=True)
class Signal:
    at: datetime
    host: str
    kind: str  # "sample", "vrrp", "push"
    text: str
    bad: bool = False


def _hosts(incident: Incident) -> list[FirewallHost]:
    """The hosts of the sites that serve the incident's buildings (every host when the incident
    names none, and sites that serve every building)."""
    buildings = list(incident.buildings.values_list("pk", flat=True))
    hosts = FirewallHost.objects.filter(enabled=True)
    if buildings:
        hosts = hosts.filter(Q(site__buildings__in=buildings) | Q(site__buildings__isnull=True))
    return list(hosts.distinct().order_by("name"))


def _sample_text(sample: HostHealthSample, drops: int | None) -> tuple[str, bool]:
    if not sample.reachable:
        return _("unreachable"), True
    parts = []
    if sample.softirq_per_cpu:
        cores = " ".join(f"{round(100 * share)}%" for share in sample.softirq_per_cpu)
        parts.append(_("softirq per core: %(cores)s") % {"cores": cores})
    if sample.conntrack_count is not None:
        parts.append(
            _("conntrack %(count)s of %(max)s")
            % {"count": sample.conntrack_count, "max": sample.conntrack_max or "?"}
        )
    if drops:
        parts.append(_("%(n)s new connections dropped") % {"n": drops})
    busy = max(sample.softirq_per_cpu or [0]) > 0.9
    full = (
        bool(sample.conntrack_max) and (sample.conntrack_count or 0) > 0.95 * sample.conntrack_max
    )
    return " · ".join(parts) or _("reachable"), busy or full or bool(drops)


def _roles(sample: HostHealthSample) -> dict[str, str]:
    instances = (sample.ha or {}).get("instances") or {} if sample.reachable else {}
    return {family: str((info or {}).get("state", "?")) for family, info in instances.items()}


def incident_signals(incident: Incident, *, window: timedelta = WINDOW) -> list[Signal]:
    """Health samples, VRRP changes and push steps from `window` before to `window` after the
    start, oldest first (at most MAX_ROWS)."""
    hosts = _hosts(incident)
    start, end = incident.started_at - window, incident.started_at + window
    signals: list[Signal] = []
    for host in hosts:
        samples = list(
            HostHealthSample.objects.filter(host=host, at__gte=start, at__lte=end).order_by("at")[
                :MAX_ROWS
            ]
        )
        previous: HostHealthSample | None = None
        for sample in samples:
            drops = None
            stats, before = (
                sample.conntrack_stats or {},
                (previous.conntrack_stats if previous else {}) or {},
            )
            if stats and before:
                drops = sum(max(0, stats.get(k, 0) - before.get(k, 0)) for k in DROP_KEYS)
            text, bad = _sample_text(sample, drops)
            signals.append(Signal(sample.at, host.name, "sample", text, bad))
            if previous is not None:
                old, new = _roles(previous), _roles(sample)
                for family in sorted(set(old) | set(new)):
                    if old.get(family) != new.get(family):
                        change = f"{family}: {old.get(family, '-')} → {new.get(family, '-')}"
                        signals.append(Signal(sample.at, host.name, "vrrp", change, True))
            previous = sample
    pushes = PushLogEntry.objects.filter(host__in=hosts, at__gte=start, at__lte=end).select_related(
        "host"
    )
    for entry in pushes.order_by("at")[:MAX_ROWS]:
        outcome = _("ok") if entry.ok else _("failed")
        text = f"{entry.get_step_display()}: {outcome}" + (
            f" ({entry.message[:120]})" if entry.message else ""
        )
        signals.append(Signal(entry.at, entry.host.name, "push", text, not entry.ok))
    signals.sort(key=lambda s: (s.at, s.host, s.kind))
    return signals[:MAX_ROWS]


def signal_kinds() -> dict[str, Any]:
    return {"sample": _("health"), "vrrp": _("VRRP role"), "push": _("push")}
