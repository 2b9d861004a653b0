"""Beat tasks about health: the system's own heartbeat and the firewalls' health and drift."""

from __future__ import annotations

import structlog
from celery import shared_task

from apps.infra.heartbeat import beat_alive_mark, heartbeat_record

__all__ = ["beat_alive_mark", "firewall_health_collect", "heartbeat"]
log = structlog.get_logger(__name__)


@shared_task(bind=True, ignore_result=True)
def heartbeat(self) -> None:  # type: ignore[no-untyped-def]
    """Prove that beat schedules and a worker executes (shown on the system status page)."""
    heartbeat_record(worker=self.request.hostname or "unknown")


@shared_task(ignore_result=True, soft_time_limit=120)
def firewall_health_collect() -> None:
    """Collect every enabled host's health and content digest; repair drift by pushing in full
    what the host should run (under its site's lock); converge sites whose hosts are behind,
    whose changes wait without a run, or that have not compiled the database for
    `PORTAL_FIREWALL_RECONCILE_INTERVAL` seconds (a change whose record and run were both lost
    with Redis still reaches the hosts within that time: the database is the truth)."""
    from apps.firewall.models import FirewallHost, RuleSetVersion
    from apps.firewall.pipeline import (
        LockBusy,
        changes_waiting,
        firewall_change_request,
        site_lock,
    )
    from apps.firewall.rollout import host_drift_repair
    from apps.health.services import host_drifted, host_health_collect

    behind: set[int] = set()
    hosts = FirewallHost.objects.filter(enabled=True).select_related("site", "pinned_version")
    for host in hosts:
        latest = RuleSetVersion.objects.filter(host=host).values_list("content_hash", flat=True)
        if not host.is_pinned and (latest.first() is None or not host.runs(latest.first())):
            behind.add(host.site_id)
        sample = host_health_collect(host=host)
        if host_drifted(host=host, sample=sample):
            log.warning("firewall.drift", host=host.name, parts=host.drift[:10])
            try:
                with site_lock(host.site_id):
                    outcome = host_drift_repair(host=host)
            except LockBusy:
                continue  # a rollout is running; the next collection looks again
            log.info("firewall.drift_repair", host=host.name, ok=bool(outcome and outcome.ok))
    sites = {h.site_id for h in hosts}
    if behind:
        # A host without the newest version (new, back from an outage, failed): converge.
        firewall_change_request(cause="convergence (health check)", site_ids=sorted(behind))
    waiting = [site for site in sites - behind if changes_waiting(site)]
    if waiting:
        # Changes were recorded but their run was lost (a purged queue): run now.
        firewall_change_request(cause="pending changes (health check)", site_ids=waiting)
    stale = sites_not_compiled_since(sites - behind - set(waiting))
    if stale:
        # Nothing says a change waits, but Redis may have lost its record (an outage longer
        # than the clients' retries): compile from the database; unchanged hosts are skipped.
        firewall_change_request(cause="reconcile (health check)", site_ids=stale)


def sites_not_compiled_since(sites: set[int]) -> list[int]:
    """Of `sites`, those no run compiled for `PORTAL_FIREWALL_RECONCILE_INTERVAL` seconds."""
    from datetime import timedelta

    from django.conf import settings
    from django.db.models import Max
    from django.utils import timezone

    from apps.firewall.models import RuleSetVersion

    interval = settings.PORTAL_FIREWALL_RECONCILE_INTERVAL
    if not interval or not sites:
        return []
    cutoff = timezone.now() - timedelta(seconds=interval)
    last = dict(
        RuleSetVersion.objects.filter(host__site_id__in=sites, host__enabled=True)
        .values("host__site_id")
        .annotate(last=Max("snapshot_at"))
        .values_list("host__site_id", "last")
    )
    return sorted(site for site in sites if site in last and last[site] < cutoff)
