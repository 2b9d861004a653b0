"""Tickets from people: members open and answer, staff reply, note, update and act in bulk."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.tickets.choices import MessageKind, TicketChannel, TicketStatus
from apps.tickets.models import Incident, Message, Queue, Ticket
from apps.tickets.services.helpers import (
    UNSET,
    TicketError,
    _audit,
    _msgid,
    _reply_subject,
    _thread_headers,
    placeholders_fill,
)
from apps.tickets.services.inbound import _incident_autolink, queue_default
from apps.tickets.services.outbound import _send_after_commit

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@transaction.atomic
def ticket_open(*, actor: User, subject: str, body: str) -> Ticket:
    """A member opens a ticket from the portal."""
    subject, body = subject.strip(), body.strip()
    if not subject or not body:
        raise TicketError(_("Subject and message are required."))
    ticket = Ticket.objects.create(
        requester=actor,
        requester_email=actor.email,
        requester_name=actor.get_full_name(),
        subject=subject[:300],
        channel=TicketChannel.PORTAL,
        queue=queue_default(),
    )
    Message.objects.create(
        ticket=ticket,
        kind=MessageKind.INBOUND,
        author=actor,
        from_email=actor.email,
        from_name=actor.get_full_name(),
        subject=subject[:300],
        body_text=body,
    )
    _audit(actor=actor, action="ticket.create", obj=ticket, ticket=ticket, detail="portal")
    _incident_autolink(ticket, f"{subject}\n{body}")
    return ticket


@transaction.atomic
def ticket_member_post(*, ticket: Ticket, actor: User, body: str) -> Message:
    """The requester adds to their ticket from the portal (reopens it when solved)."""
    body = body.strip()
    if not body:
        raise TicketError(_("The message is empty."))
    if ticket.status == TicketStatus.CLOSED:
        raise TicketError(_("This ticket is closed; please open a new one."))
    message = Message.objects.create(
        ticket=ticket,
        kind=MessageKind.INBOUND,
        author=actor,
        from_email=actor.email,
        from_name=actor.get_full_name(),
        body_text=body,
    )
    ticket.last_message_at = timezone.now()
    fields = ["last_message_at", "updated_at"]
    if ticket.status in (TicketStatus.WAITING, TicketStatus.SOLVED):
        ticket.status, ticket.solved_at = TicketStatus.OPEN, None
        fields += ["status", "solved_at"]
    ticket.save(update_fields=fields)
    _audit(actor=actor, action="ticket.member_post", obj=ticket, ticket=ticket)
    return message


@transaction.atomic
def ticket_reply(
    *, ticket: Ticket, actor: User, body: str, status: str = TicketStatus.WAITING
) -> Message:
    """Staff answer the requester: a message in the thread and a mail with threading headers."""
    body = body.strip()
    if not body:
        raise TicketError(_("The reply is empty."))
    ticket = Ticket.objects.select_for_update().get(pk=ticket.pk)
    in_reply_to, references = _thread_headers(ticket)
    now = timezone.now()
    message = Message.objects.create(
        ticket=ticket,
        kind=MessageKind.OUTBOUND,
        author=actor,
        from_name=actor.get_full_name(),
        to_email=ticket.requester_email,
        subject=_reply_subject(ticket),
        body_text=placeholders_fill(body, ticket=ticket, actor=actor),
        message_id=_msgid(ticket),
        in_reply_to=in_reply_to,
        references=references,
        created_at=now,
    )
    _status_set(ticket, status, now)
    ticket.first_response_at = ticket.first_response_at or now
    ticket.last_message_at = now
    if ticket.assignee_id is None:
        ticket.assignee = actor
    ticket.save(
        update_fields=[
            "status",
            "solved_at",
            "first_response_at",
            "last_message_at",
            "assignee",
            "updated_at",
        ]
    )
    _audit(actor=actor, action="ticket.reply", obj=ticket, ticket=ticket)
    if ticket.requester_email:
        _send_after_commit(message)
    return message


@transaction.atomic
def ticket_note(*, ticket: Ticket, actor: User, body: str) -> Message:
    """An internal note: staff only, never mailed."""
    body = body.strip()
    if not body:
        raise TicketError(_("The note is empty."))
    message = Message.objects.create(
        ticket=ticket,
        kind=MessageKind.NOTE,
        author=actor,
        from_name=actor.get_full_name(),
        body_text=body,
    )
    _audit(actor=actor, action="ticket.note", obj=ticket, ticket=ticket)
    return message


def _status_set(ticket: Ticket, status: str, now: Any) -> None:
    if status not in TicketStatus.values:
        raise TicketError(_("Unknown status."))
    ticket.status = status
    if status in (TicketStatus.SOLVED, TicketStatus.CLOSED):
        ticket.solved_at = ticket.solved_at or now
    else:
        ticket.solved_at = None


@transaction.atomic
def ticket_update(
    *,
    ticket: Ticket,
    actor: User,
    status: str = UNSET,
    assignee: Any = UNSET,
    queue: Queue | None = UNSET,
    tags: list[str] = UNSET,
    incident: Incident | None = UNSET,
) -> Ticket:
    """Change status, assignee, queue, tags or incident; each change is one event."""
    ticket = Ticket.objects.select_for_update().get(pk=ticket.pk)
    now = timezone.now()
    changes: list[str] = []
    if status is not UNSET and status != ticket.status:
        _status_set(ticket, status, now)
        changes.append(f"status={status}")
    if assignee is not UNSET and assignee != ticket.assignee:
        ticket.assignee = assignee
        changes.append(f"assignee={assignee.get_username() if assignee else '-'}")
    if queue is not UNSET and queue != ticket.queue:
        ticket.queue = queue
        changes.append(f"queue={queue.slug if queue else '-'}")
    if tags is not UNSET:
        clean = sorted({t.strip().lower()[:40] for t in tags if t.strip()})
        if clean != sorted(ticket.tags):
            ticket.tags = clean
            changes.append(f"tags={','.join(clean)}")
    if incident is not UNSET and incident != ticket.incident:
        ticket.incident = incident
        changes.append(f"incident={incident.pk if incident else '-'}")
    if changes:
        ticket.save()
        _audit(
            actor=actor,
            action="ticket.update",
            obj=ticket,
            ticket=ticket,
            detail="; ".join(changes),
        )
    return ticket


BULK_ACTIONS = ("assign_me", "unassign", "open", "waiting", "solved", "closed", "incident", "tag")


@transaction.atomic
def tickets_bulk_update(
    *, tickets: Iterable[Ticket], actor: User, action: str, value: Any = None
) -> int:
    """Apply one inbox action to several tickets; returns how many changed."""
    if action not in BULK_ACTIONS:
        raise TicketError(_("Unknown action."))
    count = 0
    for ticket in tickets:
        kwargs: dict[str, Any] = {}
        if action == "assign_me":
            kwargs["assignee"] = actor
        elif action == "unassign":
            kwargs["assignee"] = None
        elif action == "incident":
            kwargs["incident"] = value
        elif action == "tag":
            kwargs["tags"] = [*ticket.tags, str(value or "")]
        else:
            kwargs["status"] = action
        ticket_update(ticket=ticket, actor=actor, **kwargs)
        count += 1
    return count
