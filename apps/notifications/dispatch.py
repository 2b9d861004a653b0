"""Enqueue the notice mail flush by its name: services never import `workers.notifications`
(which imports them), as apps/firewall/dispatch.py does for the firewall."""

from __future__ import annotations

from apps.infra.celery import task_send

MAIL_FLUSH = "workers.notifications.notices_mail_flush"


def notices_mail_flush(*, countdown: float | None = None) -> None:
    """Mail the notices waiting, `countdown` seconds from now (a burst gathers first)."""
    task_send(MAIL_FLUSH, countdown=countdown)
