"""Beat tasks about health: the system's own heartbeat and the firewalls' health and drift."""

from __future__ import annotations

import structlog
from celery import shared_task

from apps.health.heartbeat import beat_alive_mark, heartbeat_record

__all__ = ["beat_alive_mark", "firewall_health_collect", "heartbeat"]
log = structlog.get_logger(__name__)


@shared_task(bind=True, ignore_result=True)
def heartbeat(self) -> None:  # type: ignore[no-untyped-def]
    """Prove that beat schedules and a worker executes (shown on the system status page)."""
    heartbeat_record(worker=self.request.hostname or "unknown")


@shared_task(ignore_result=True, soft_time_limit=120)
def firewall_health_collect() -> None:
    """Collect every enabled host's health; repair drift by pushing its newest version."""
    from apps.firewall.models import FirewallHost
    from apps.firewall.pipeline import (
        LockBusy,
        changes_waiting,
        firewall_change_request,
        firewall_lock,
    )
    from apps.firewall.services import host_drift_repair
    from apps.health.services import host_drifted, host_health_collect

    behind = False
    for host in FirewallHost.objects.filter(enabled=True):
        latest = host.versions.values_list("content_hash", flat=True).first()
        behind |= latest is None or host.applied_checksum != latest or host.push_status != "applied"
        sample = host_health_collect(host=host)
        if host_drifted(host=host, sample=sample):
            log.warning("firewall.drift", host=host.name, loaded=sample.loaded_version)
            try:
                with firewall_lock():
                    outcome = host_drift_repair(host=host)
            except LockBusy:
                continue  # a rollout is running; the next collection looks again
            log.info("firewall.drift_repair", host=host.name, ok=bool(outcome and outcome.ok))
    if behind:
        # A host without the newest version (new, back from an outage, failed): converge.
        firewall_change_request(cause="convergence (health check)")
    elif changes_waiting():
        # Changes were recorded but their run was lost (a purged queue): run now.
        firewall_change_request(cause="pending changes (health check)")
