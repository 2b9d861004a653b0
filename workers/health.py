"""Beat tasks about health: the system's own heartbeat and the firewalls' health and drift."""

from __future__ import annotations

from celery import shared_task

from apps.health import services
from apps.infra.heartbeat import beat_alive_mark, heartbeat_record

__all__ = ["beat_alive_mark", "firewall_health_collect", "heartbeat"]


@shared_task(bind=True, ignore_result=True)
def heartbeat(self) -> None:  # type: ignore[no-untyped-def]
    """Prove that beat schedules and a worker executes (shown on the system status page)."""
    heartbeat_record(worker=self.request.hostname or "unknown")


@shared_task(ignore_result=True, soft_time_limit=120)
def firewall_health_collect() -> None:
    """Every enabled host's health and drift; sites behind converge (apps/health/services.py)."""
    services.firewalls_health_collect()
