"""Outbound mail: messages and incident broadcasts are sent after commit, by the mail worker."""

from __future__ import annotations

from email.utils import formataddr
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db import models, transaction
from django.utils import timezone

from apps.tickets import dispatch
from apps.tickets.choices import MessageKind
from apps.tickets.models import Message


def _send_after_commit(message: Message) -> None:
    message_id = message.pk
    transaction.on_commit(lambda: dispatch.ticket_message_send(message_id))


def message_email(message: Message, connection: Any = None) -> EmailMessage:
    """The mail for one outbound message, with Message-ID, In-Reply-To and References."""
    headers = {"Message-ID": message.message_id}
    if message.in_reply_to:
        headers["In-Reply-To"] = message.in_reply_to
    if message.references:
        headers["References"] = message.references
    if message.is_automatic:
        headers["Auto-Submitted"] = "auto-replied"
        headers["X-Auto-Response-Suppress"] = "All"
    address = settings.PORTAL_TICKET_ADDRESS
    return EmailMessage(
        subject=message.subject,
        body=message.body_text,
        from_email=formataddr((settings.PORTAL_TICKET_FROM_NAME, address)),
        to=[message.to_email],
        reply_to=[address],
        headers=headers,
        connection=connection,
    )


def message_send(*, message_id: int) -> bool:
    """Send one outbound message unless it was sent already; True when this call sent it."""
    with transaction.atomic():
        message = (
            Message.objects.select_for_update(skip_locked=True)
            .filter(pk=message_id, kind=MessageKind.OUTBOUND, sent_at__isnull=True)
            .first()
        )
        if message is None:
            return False  # sent already, or another worker holds it right now
        try:
            message_email(message).send(fail_silently=False)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"[:2000]
        else:
            message.sent_at = timezone.now()
            message.send_attempts += 1
            message.send_error = ""
            message.save(update_fields=["sent_at", "send_attempts", "send_error"])
            return True
    Message.objects.filter(pk=message_id).update(
        send_attempts=models.F("send_attempts") + 1, send_error=error
    )
    raise OSError(error)


def broadcast_send(*, broadcast_id: int, batch: int = 100) -> int:
    """Send the unsent messages of a mass reply in batches over one SMTP connection.

    Rows are locked while their batch is sent and marked sent in the same transaction, so a
    retried or duplicated task never mails a ticket twice.
    """
    sent = 0
    with get_connection() as connection:
        while True:
            error = None
            with transaction.atomic():
                rows = list(
                    Message.objects.select_for_update(skip_locked=True)
                    .filter(broadcast_id=broadcast_id, sent_at__isnull=True)
                    .order_by("id")[:batch]
                )
                if not rows:
                    return sent
                done: list[int] = []
                for message in rows:
                    try:
                        connection.send_messages([message_email(message, connection)])
                    except Exception as exc:
                        error = f"{type(exc).__name__}: {exc}"[:2000]
                        break
                    done.append(message.pk)
                Message.objects.filter(pk__in=done).update(
                    sent_at=timezone.now(), send_attempts=models.F("send_attempts") + 1
                )
                sent += len(done)
            if error is not None:
                raise OSError(error)
