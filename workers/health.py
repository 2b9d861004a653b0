"""Beat tasks about the health of the system itself."""

from __future__ import annotations

from celery import shared_task

from apps.health.heartbeat import beat_alive_mark, heartbeat_record

__all__ = ["beat_alive_mark", "heartbeat"]


@shared_task(bind=True, ignore_result=True)
def heartbeat(self) -> None:  # type: ignore[no-untyped-def]
    """Prove that beat schedules and a worker executes (shown on the system status page)."""
    heartbeat_record(worker=self.request.hostname or "unknown")
