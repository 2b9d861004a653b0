"""Alert tasks: settle resolved groups after their hold-down, mail staff warnings. Thin
wrappers around apps.alerts.services."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from apps.alerts import services


@shared_task(ignore_result=True, soft_time_limit=120)
def alert_groups_settle() -> int:
    """Say "working again" on incidents whose alerts stayed resolved through the hold-down."""
    return services.alert_groups_settle()


@shared_task(bind=True, max_retries=5, soft_time_limit=60, ignore_result=True)
def alert_warning_mail(self: Any, group_id: int) -> int:
    """Mail a staff warning; retried when the mail server fails."""
    try:
        return services.alert_warning_mail(group_id=group_id)
    except OSError as exc:
        raise self.retry(exc=exc, countdown=30) from exc
