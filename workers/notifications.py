"""Notification tasks: mail pending notices in batches, tell a building of an outage, and
decide how recent changes went live. Thin wrappers around apps.notifications.services."""

from __future__ import annotations

from typing import Any

import structlog
from celery import shared_task

from apps.notifications import services

log = structlog.get_logger(__name__)


@shared_task(bind=True, max_retries=8, soft_time_limit=840, acks_late=True)
def notices_mail_flush(self: Any) -> int:
    """Mail what is pending (one mail per member and kind and hour); retried when the mail
    server fails, sending only what is still unsent."""
    try:
        return services.notices_mail_flush()
    except OSError as exc:
        raise self.retry(exc=exc, countdown=min(600, 15 * 2**self.request.retries)) from exc


@shared_task(ignore_result=True, soft_time_limit=600, acks_late=True)
def incident_notices_create(incident_id: int) -> int:
    """Make the notices of a newly declared incident for everyone in its buildings."""
    told = services.incident_notices_create(incident_id=incident_id)
    log.info("notices.incident", incident=incident_id, members=told)
    return told


@shared_task(ignore_result=True, soft_time_limit=120)
def live_checks_run() -> int:
    """Tell members about changes that failed to go live or went live late."""
    return len(services.live_checks_run())
