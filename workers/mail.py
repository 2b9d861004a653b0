"""Celery tasks of tickets' mail: outbound messages and broadcasts, and the IMAP poll.

Thin wrappers around apps/tickets (services send them by name: apps/tickets/dispatch.py); the
SMTP listener and the IMAP reading live in apps/tickets/mailin.py.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from apps.tickets import mailin
from apps.tickets.services import broadcast_send, message_send


@shared_task(bind=True, max_retries=8, soft_time_limit=60, acks_late=True)
def ticket_message_send(self: Any, message_id: int) -> bool:
    """Mail one outbound ticket message (idempotent: a sent message is never sent again)."""
    try:
        return message_send(message_id=message_id)
    except OSError as exc:
        raise self.retry(exc=exc, countdown=min(600, 15 * 2**self.request.retries)) from exc


@shared_task(bind=True, max_retries=8, soft_time_limit=600, acks_late=True)
def incident_broadcast_send(self: Any, broadcast_id: int) -> int:
    """Mail a mass reply; retries send only what is still unsent."""
    try:
        return broadcast_send(broadcast_id=broadcast_id)
    except OSError as exc:
        raise self.retry(exc=exc, countdown=min(600, 15 * 2**self.request.retries)) from exc


@shared_task(soft_time_limit=240)
def imap_poll() -> int:
    """Fetch unseen mail from the IMAP mailbox (apps/tickets/mailin.py)."""
    return mailin.imap_poll()
