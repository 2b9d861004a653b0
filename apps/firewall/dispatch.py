"""Enqueue the firewall's Celery tasks by name.

Services and the pipeline never import `workers.firewall` (which imports them): they send the
task by its name, and CELERY_TASK_ROUTES puts it on the `firewall` queue, whose one worker
process keeps one warm snapshot cache for every push and never waits behind mail.
"""

from __future__ import annotations

from apps.infra.celery import app

SYNC = "workers.firewall.firewall_sync"
ROLLBACK = "workers.firewall.host_rollback"


def firewall_sync(site_id: int, *, countdown: float | None = None) -> None:
    """Compile and roll out one site."""
    app.send_task(SYNC, args=(site_id,), countdown=countdown)


def host_rollback(host_id: int, version_id: int, actor_id: int | None) -> None:
    """Put a stored version back on one host and pin it there."""
    app.send_task(ROLLBACK, args=(host_id, version_id, actor_id))
