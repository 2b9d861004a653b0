"""Enqueue the alert tasks by name (services never import `workers.alerts`)."""

from __future__ import annotations

from apps.infra.celery import task_send

SETTLE = "workers.alerts.alert_groups_settle"
WARNING_MAIL = "workers.alerts.alert_warning_mail"


def alert_groups_settle(*, countdown: float | None = None) -> None:
    """Look at resolved groups once their hold-down has passed."""
    task_send(SETTLE, countdown=countdown)


def alert_warning_mail(group_id: int) -> None:
    """Mail a staff warning to those who asked for them."""
    task_send(WARNING_MAIL, group_id)
