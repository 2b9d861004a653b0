"""The off-site status page: render and copy it, retried while the target does not answer.
A thin wrapper around apps.tickets.publish."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from apps.tickets import publish


@shared_task(bind=True, max_retries=10, soft_time_limit=90, ignore_result=True)
def status_publish(self: Any) -> str:
    """Publish now; on failure retry after 5, 10, 20 ... s (at most 5 minutes apart)."""
    try:
        return publish.status_publish()
    except (publish.PublishError, OSError) as exc:
        raise self.retry(exc=exc, countdown=min(300, 5 * 2**self.request.retries)) from exc
