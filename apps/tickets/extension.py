"""Tickets' part in a membership (apps/members/extensions.py): the member's tickets in their
data download, and deleted with their messages and attachments at the erasure."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from apps.members.extensions import MemberExtension
from apps.members.models import Member
from apps.members.privacy import plain
from apps.tickets.choices import MessageKind
from apps.tickets.models import Message, Ticket


def _tickets(member: Member) -> list[dict[str, Any]]:
    tickets = Ticket.objects.filter(requester=member.user).order_by("created_at", "id")
    out = []
    for ticket in tickets:
        messages = (
            Message.objects.filter(ticket=ticket)
            .exclude(kind=MessageKind.NOTE)  # internal notes are the staff's, not the member's
            .order_by("created_at", "id")
        )
        out.append(
            {
                "number": ticket.pk,
                "subject": ticket.subject,
                "status": ticket.status,
                "created_at": plain(ticket.created_at),
                "messages": [
                    {
                        "kind": m.kind,
                        "from": m.from_email,
                        "subject": m.subject,
                        "text": m.body_text,
                        "at": plain(m.created_at),
                        "attachments": [a.filename for a in m.attachments.all()],
                    }
                    for m in messages.prefetch_related("attachments")
                ],
            }
        )
    return out


class TicketsMemberExtension(MemberExtension):
    """The member's tickets, with their messages (internal notes left out)."""

    def member_data(self, *, member: Member) -> dict[str, Any]:
        return {"tickets": _tickets(member)}

    def member_erase(self, *, member: Member) -> None:
        user = member.user
        Ticket.objects.filter(
            Q(requester=user) | Q(requester_email__iexact=user.email or "-")
        ).delete()
