"""Enqueue the mail tasks of tickets, and the incident's notices, by their names.

The services never import `workers.mail` or `workers.notifications` (which import the services):
they send by name, after the commit, as apps/firewall/dispatch.py does for the firewall.
"""

from __future__ import annotations

from apps.infra.celery import task_send

MESSAGE_SEND = "workers.mail.ticket_message_send"
BROADCAST_SEND = "workers.mail.incident_broadcast_send"
INCIDENT_NOTICES = "workers.notifications.incident_notices_create"


def ticket_message_send(message_id: int) -> None:
    """Mail one outbound message."""
    task_send(MESSAGE_SEND, message_id)


def incident_broadcast_send(broadcast_id: int) -> None:
    """Mail an incident's mass reply to every requester."""
    task_send(BROADCAST_SEND, broadcast_id)


def incident_notices_create(incident_id: int) -> None:
    """Tell every member of the incident's buildings (the notifications app, when installed)."""
    task_send(INCIDENT_NOTICES, incident_id)


STATUS_PUBLISH = "workers.status.status_publish"


def status_publish() -> None:
    """Publish the status page off-site (apps/tickets/publish.py)."""
    task_send(STATUS_PUBLISH)
