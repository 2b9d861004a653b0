"""What every tickets service shares: the refusal type, audit rows, the default queue, mail
threading headers and reply placeholders."""

from __future__ import annotations

import re
from email.utils import make_msgid
from typing import TYPE_CHECKING, Any

from django.apps import apps as django_apps
from django.conf import settings
from django.db import models
from django.utils.translation import gettext as _

from apps.tickets.choices import MessageKind
from apps.tickets.models import Message, Ticket, TicketEvent

if TYPE_CHECKING:
    from django.contrib.auth.models import User


# "[#12:3fa9c01b2e]" (number and reply token); "[#12]" as written by hand or by older mails.
SUBJECT_TAG = re.compile(r"\[#(\d{1,12})(?::([0-9a-f]{10}))?\]")
UNSET: Any = object()


class TicketError(ValueError):
    """A request the tickets app refuses (shown to the user)."""


def _audit(
    *,
    actor: User | None,
    action: str,
    obj: models.Model,
    ticket: Ticket | None = None,
    detail: str = "",
) -> None:
    """The ticket's own event and, once that app is installed, the portal-wide audit trail."""
    if ticket is not None:
        TicketEvent.objects.create(
            ticket=ticket,
            actor=actor if getattr(actor, "is_authenticated", False) else None,
            action=action,
            detail=detail[:300],
        )
    if django_apps.is_installed("apps.audit"):
        from apps.audit.services import audit_record  # audit is optional (is_installed)

        changes = {"detail": [None, detail]} if detail else None
        audit_record(actor=actor, action=action, obj=obj, changes=changes)


def _msgid(ticket: Ticket) -> str:
    return make_msgid(idstring=f"t{ticket.pk}", domain=settings.PORTAL_MAIL_DOMAIN)


def _reply_subject(ticket: Ticket) -> str:
    subject = re.sub(r"^(\s*(re|aw|fwd?|wg)\s*:\s*)+", "", ticket.subject, flags=re.I).strip()
    subject = SUBJECT_TAG.sub("", subject).strip()
    return f"Re: {subject} {ticket.subject_tag}"[:300]


def _thread_headers(ticket: Ticket, messages: list[Message] | None = None) -> tuple[str, str]:
    """(In-Reply-To, References) for a new outbound message of `ticket`."""
    if messages is None:
        messages = list(
            ticket.messages.exclude(kind=MessageKind.NOTE)
            .exclude(message_id="")
            .order_by("created_at", "id")
            .only("message_id", "kind")
        )
    ids = [m.message_id for m in messages if m.message_id]
    if not ids:
        return "", ""
    inbound = [m.message_id for m in messages if m.kind == MessageKind.INBOUND and m.message_id]
    in_reply_to = inbound[-1] if inbound else ids[-1]
    refs = ids if len(ids) <= 10 else [ids[0], *ids[-9:]]
    return in_reply_to, " ".join(refs)


# "#{ticket_number}" must not read "##12": the number carries its sign already.
_HASH_BEFORE_NUMBER = re.compile(r"#+(?=\{ticket_number\})")
# A placeholder with nothing to fill in takes the blanks before it along: "Hello {first_name},"
# reads "Hello," for a requester known only by address, never "Hello ,".
_PLACEHOLDER_WITH_SPACE = re.compile(r"([ \t]*)\{(\w+)\}")


def greeting(first_name: str) -> str:
    """The opening line in the active language, with or without a first name."""
    if first_name:
        return _("Hello %(name)s,") % {"name": first_name}
    return _("Hello,")


def placeholders_fill(text: str, *, ticket: Ticket, actor: User | None = None) -> str:
    """Fill {greeting}, {first_name}, {last_name}, {name}, {email}, {ticket_number} (with its #),
    {subject}, {agent_name}; the greeting in the active language."""
    requester = ticket.requester
    first = (requester.first_name if requester else "") or (
        ticket.requester_name.split()[0] if ticket.requester_name.strip() else ""
    )
    values = {
        "greeting": greeting(first),
        "first_name": first,
        "last_name": requester.last_name if requester else "",
        "name": ticket.requester_display,
        "email": ticket.requester_email,
        "ticket_number": ticket.number,
        "subject": ticket.subject,
        "agent_name": (actor.get_full_name() or actor.get_username()) if actor else "",
    }

    def fill(match: re.Match[str]) -> str:
        if match.group(2) not in values:
            return match.group(0)
        value = values[match.group(2)]
        return match.group(1) + value if value else ""

    return _PLACEHOLDER_WITH_SPACE.sub(fill, _HASH_BEFORE_NUMBER.sub("", text))
