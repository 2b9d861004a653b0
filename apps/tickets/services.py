"""Writes of the tickets app: one transaction per action, an audit row, tasks after commit."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from email.utils import formataddr, make_msgid
from typing import Any

from django.apps import apps as django_apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage, get_connection
from django.db import DatabaseError, models, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone, translation
from django.utils.crypto import constant_time_compare
from django.utils.translation import gettext as _

from apps.tickets.choices import (
    ACTIVE_STATUSES,
    InboundStatus,
    IncidentPhase,
    MessageKind,
    TicketChannel,
    TicketStatus,
)
from apps.tickets.mailparse import MailParseError, ParsedMail, parse_mail
from apps.tickets.models import (
    Attachment,
    InboundMail,
    Incident,
    IncidentBroadcast,
    IncidentUpdate,
    Message,
    Queue,
    Ticket,
    TicketEvent,
)
from apps.tickets.selectors import user_for_email
from apps.tickets.status import status_cache_refresh

log = logging.getLogger(__name__)
# "[#12:3fa9c01b2e]" (number and reply token); "[#12]" as written by hand or by older mails.
SUBJECT_TAG = re.compile(r"\[#(\d{1,12})(?::([0-9a-f]{10}))?\]")
UNSET: Any = object()


class TicketError(ValueError):
    """A request the tickets app refuses (shown to the user)."""


# --- helpers ------------------------------------------------------------------------------------


def _audit(
    *, actor: Any, action: str, obj: models.Model, ticket: Ticket | None = None, detail: str = ""
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
        from apps.audit.services import audit_record

        changes = {"detail": [None, detail]} if detail else None
        audit_record(actor=actor, action=action, obj=obj, changes=changes)


def queue_default() -> Queue:
    """The queue new tickets land in (looked up once per batch of received mail)."""
    batch = _MAIL_BATCH.get()
    if batch is not None and batch.queue is not None:
        return batch.queue
    queue, _created = Queue.objects.get_or_create(slug="support", defaults={"name": "Support"})
    if batch is not None:
        batch.queue = queue
    return queue


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


def placeholders_fill(text: str, *, ticket: Ticket, actor: Any | None = None) -> str:
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


# --- inbound mail -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ReceivedMail:
    """One mail as a listener hands it over (mail_receive_batch)."""

    raw: bytes
    envelope_from: str | None
    envelope_to: Sequence[str] = ()
    source: str = "smtp"


@dataclass
class _MailBatch:
    """Lookups shared by the mails of one mail_receive_batch(): every mail of an outage burst
    asks the same questions (which queue, which incidents are current, is this Message-ID
    stored, whose address is this), so each is asked once for the batch instead of per mail.
    Anything not looked up in advance is asked as for a single mail."""

    parsed: dict[tuple[bytes, str | None], ParsedMail | MailParseError] = field(
        default_factory=dict
    )
    queue: Queue | None = None
    inbound: dict[str, Message | None] = field(default_factory=dict)
    users: dict[str, Any | None] = field(default_factory=dict)
    buildings: dict[int, int | None] = field(default_factory=dict)
    incidents: list[tuple[Incident, frozenset[int]]] | None = None


_MAIL_BATCH: ContextVar[_MailBatch | None] = ContextVar("tickets_mail_batch", default=None)


def _envelope_sender(envelope_from: str | None) -> str:
    return (envelope_from or "")[:320]


def _parse(raw: bytes, envelope_from: str | None) -> ParsedMail:
    """parse_mail(), or its result from the batch's parse ahead of the transaction."""
    batch = _MAIL_BATCH.get()
    found = batch.parsed.get((raw, envelope_from)) if batch is not None else None
    if isinstance(found, MailParseError):
        raise found
    if found is not None:
        return found
    return parse_mail(
        raw,
        envelope_from=envelope_from,
        trusted_authserv_ids=settings.PORTAL_MAIL_TRUSTED_AUTHSERV_IDS,
    )


def _batch_prepare(mails: Sequence[ReceivedMail]) -> _MailBatch:
    """Parse every mail (outside any transaction) and look up, in a few queries, what their
    ingest will ask: stored Message-IDs, senders' logins and buildings, current incidents."""
    batch = _MailBatch()
    for mail in mails:
        sender = _envelope_sender(mail.envelope_from) if mail.source == "smtp" else None
        try:
            batch.parsed[(mail.raw, sender)] = parse_mail(
                mail.raw,
                envelope_from=sender,
                trusted_authserv_ids=settings.PORTAL_MAIL_TRUSTED_AUTHSERV_IDS,
            )
        except MailParseError as exc:
            batch.parsed[(mail.raw, sender)] = exc
        except Exception:  # noqa: S112 (parsed again, and quarantined, by inbound_process)
            continue
    good = [p for p in batch.parsed.values() if isinstance(p, ParsedMail)]
    ids = {p.message_id for p in good if p.message_id}
    batch.inbound = dict.fromkeys(ids)
    for message in Message.objects.filter(message_id__in=ids, kind=MessageKind.INBOUND):
        if batch.inbound[message.message_id] is None:
            batch.inbound[message.message_id] = message
    # Senders: ASCII addresses only, where Python's and PostgreSQL's upper() agree.
    addresses = {p.from_email.upper() for p in good if p.from_email and p.from_email.isascii()}
    if addresses:
        batch.users = dict.fromkeys(addresses)
        owners: dict[str, list[Any]] = {}
        condition = Q()
        for address in addresses:
            condition |= Q(email__iexact=address)
        for user in get_user_model().objects.filter(condition, is_active=True):
            owners.setdefault(user.email.upper(), []).append(user)
        for address, users in owners.items():
            if address in batch.users:
                batch.users[address] = users[0] if len(users) == 1 else None
        found = [u.pk for u in batch.users.values() if u is not None]
        batch.buildings = dict.fromkeys(found)
        batch.buildings.update(
            django_apps.get_model("members", "Member")
            .objects.filter(user_id__in=found, room__isnull=False)
            .values_list("user_id", "room__building_id")
        )
    batch.incidents = [
        (incident, frozenset(b.pk for b in incident.buildings.all()))
        for incident in Incident.objects.current()
        .order_by("-started_at")
        .prefetch_related("buildings")
    ]
    return batch


def mail_receive_batch(mails: Sequence[ReceivedMail]) -> list[InboundMail | Exception]:
    """Store and ingest several received mails in one transaction (the SMTP listener during a
    burst): each mail exactly as mail_receive() does it, in its own savepoint, with the lookups
    every mail makes asked once for the batch (_MailBatch). One outcome per mail, in order: its
    InboundMail, or the exception that kept it from being stored (its sender must retry). When
    the commit itself fails, it raises and no mail of the batch is stored."""
    batch = _batch_prepare(mails)
    outcomes: list[InboundMail | Exception] = []
    token = _MAIL_BATCH.set(batch)
    try:
        with transaction.atomic():
            # Outside the mails' savepoints: a queue created here is never rolled back with one.
            batch.queue = queue_default()
            for mail in mails:
                try:
                    inbound = mail_receive(
                        raw=mail.raw,
                        envelope_from=mail.envelope_from,
                        envelope_to=mail.envelope_to,
                        source=mail.source,
                    )
                except Exception as exc:
                    log.exception("could not store an incoming mail")
                    outcomes.append(exc)
                    continue
                message = inbound.message
                if message is not None and message.message_id:
                    # A repeat of this mail later in the batch is a duplicate of this message.
                    batch.inbound[message.message_id] = (
                        batch.inbound.get(message.message_id) or message
                    )
                outcomes.append(inbound)
    finally:
        _MAIL_BATCH.reset(token)
    return outcomes


def mail_receive(
    *, raw: bytes, envelope_from: str | None, envelope_to: Iterable[str] = (), source: str = "smtp"
) -> InboundMail:
    """Store a received mail and turn it into a ticket message (or quarantine it), in one commit.

    The raw mail row and its outcome commit together; the ingest runs in a savepoint, so a
    failure there still commits the raw mail (quarantined). Only a failure to commit at all
    reaches the caller, which then refuses the delivery and the sender retries.
    """
    with transaction.atomic():
        inbound = InboundMail.objects.create(
            raw=raw,
            size=len(raw),
            source=source,
            envelope_from=_envelope_sender(envelope_from),
            envelope_to=", ".join(envelope_to)[:2000],
        )
        inbound_process(inbound=inbound)
    return inbound


def inbound_process(*, inbound: InboundMail) -> InboundMail:
    """Parse and ingest one stored mail; broken mail is quarantined, never lost."""
    envelope_from = inbound.envelope_from if inbound.source == "smtp" else None
    try:
        parsed = _parse(bytes(inbound.raw), envelope_from)
        with transaction.atomic():
            message, duplicate = mail_ingest(parsed=parsed)
            inbound.status = InboundStatus.DUPLICATE if duplicate else InboundStatus.PROCESSED
            inbound.message = message
            inbound.error = ""
            inbound.save(update_fields=["status", "message", "error"])
    except MailParseError as exc:
        _quarantine(inbound, str(exc))
    except DatabaseError as exc:
        if transaction.get_connection().needs_rollback or not _connection_usable():
            raise  # the outer transaction is lost: let the sender retry
        log.exception("mail %s: database error while ingesting", inbound.pk)
        _quarantine(inbound, f"{type(exc).__name__}: {exc}")
    except Exception as exc:
        log.exception("mail %s: unexpected error, quarantined", inbound.pk)
        _quarantine(inbound, f"{type(exc).__name__}: {exc}")
    return inbound


def _connection_usable() -> bool:
    connection = transaction.get_connection()
    return connection.connection is not None and connection.is_usable()


def _quarantine(inbound: InboundMail, reason: str) -> None:
    inbound.status = InboundStatus.QUARANTINED
    inbound.error = reason[:2000]
    inbound.save(update_fields=["status", "error"])
    log.warning("mail %s quarantined: %s", inbound.pk, reason)
    _audit(actor=None, action="mail.quarantine", obj=inbound, detail=reason[:200])


def _ticket_for_reply(parsed: ParsedMail) -> Ticket | None:
    """The ticket this mail answers, only when the mail proves it belongs there: it answers one
    of the ticket's messages (In-Reply-To/References), or quotes the ticket's reply token in
    its subject; a bare number ("[#12]") only from the requester's address and with a trusted
    server's word that the address is genuine (From can be forged, numbers guessed)."""
    ids = parsed.thread_ids
    if ids:
        found = (
            Message.objects.filter(message_id__in=ids)
            .select_related("ticket")
            .order_by("-created_at")
            .first()
        )
        if found is not None:
            return found.ticket
    match = SUBJECT_TAG.search(parsed.subject)
    if match is None:
        return None
    ticket = Ticket.objects.filter(pk=int(match.group(1))).select_related("requester").first()
    if ticket is None:
        return None
    if match.group(2) and constant_time_compare(match.group(2), ticket.reply_token):
        return ticket
    from_requester = parsed.from_email in {
        ticket.requester_email.lower(),
        (ticket.requester.email.lower() if ticket.requester else ""),
    }
    return ticket if from_requester and parsed.sender_authenticated else None


def _new_ticket_requester(parsed: ParsedMail) -> tuple[Any | None, bool]:
    """(the user a new mail ticket belongs to, whether its sender is unverified): mail from a
    member's address is theirs only when a trusted server vouched for the address; otherwise
    the ticket stays unlinked, marked, until staff confirm."""
    batch = _MAIL_BATCH.get()
    key = parsed.from_email.upper()
    if batch is not None and key in batch.users:
        user = batch.users[key]
    else:
        user = user_for_email(parsed.from_email)
    if user is None or parsed.sender_authenticated:
        return user, False
    return None, True


def mail_ingest(*, parsed: ParsedMail) -> tuple[Message, bool]:
    """Add a parsed mail to its ticket or open a new one; returns (message, was_duplicate)."""
    if parsed.message_id:
        batch = _MAIL_BATCH.get()
        if batch is not None and parsed.message_id in batch.inbound:
            existing = batch.inbound[parsed.message_id]
        else:
            existing = Message.objects.filter(
                message_id=parsed.message_id, kind=MessageKind.INBOUND
            ).first()
        if existing is not None:
            return existing, True
    ticket = _ticket_for_reply(parsed)
    if ticket is not None and ticket.status == TicketStatus.CLOSED:
        ticket = None  # closed is final: a new ticket, which mentions the old one
    created = ticket is None
    if created:
        requester, unverified = _new_ticket_requester(parsed)
        ticket = Ticket.objects.create(
            requester=requester,
            sender_unverified=unverified,
            requester_email=parsed.from_email,
            requester_name=parsed.from_name,
            subject=SUBJECT_TAG.sub("", parsed.subject).strip()[:300] or _("(no subject)"),
            channel=TicketChannel.MAIL,
            queue=queue_default(),
            tags=["automatic"] if parsed.is_automatic else [],
        )
    message = Message.objects.create(
        ticket=ticket,
        kind=MessageKind.INBOUND,
        from_email=parsed.from_email,
        from_name=parsed.from_name,
        to_email=parsed.to,
        subject=parsed.subject,
        body_text=parsed.body_text,
        body_html=parsed.body_html,
        message_id=parsed.message_id,
        in_reply_to=parsed.in_reply_to,
        references=" ".join(parsed.references),
        is_automatic=parsed.is_automatic,
        automatic_reason=parsed.automatic_reason,
    )
    _attachments_store(message, parsed)
    if created:
        _audit(actor=None, action="ticket.create", obj=ticket, ticket=ticket, detail="mail")
        _incident_autolink(ticket, f"{parsed.subject}\n{parsed.body_text}")
        if not parsed.is_automatic:
            _acknowledge(ticket)
    else:
        fields = ["last_message_at", "updated_at"]
        ticket.last_message_at = timezone.now()
        if ticket.status in (TicketStatus.WAITING, TicketStatus.SOLVED) and not parsed.is_automatic:
            ticket.status = TicketStatus.OPEN
            ticket.solved_at = None
            fields += ["status", "solved_at"]
        ticket.save(update_fields=fields)
        _audit(
            actor=None,
            action="ticket.mail_reply",
            obj=ticket,
            ticket=ticket,
            detail=parsed.automatic_reason,
        )
    return message, False


def _attachments_store(message: Message, parsed: ParsedMail) -> None:
    limit = settings.PORTAL_TICKET_ATTACHMENT_MAX_BYTES
    Attachment.objects.bulk_create(
        Attachment(
            message=message,
            filename=a.filename,
            content_type=a.content_type,
            size=len(a.data),
            data=a.data if len(a.data) <= limit else b"",
            stored=len(a.data) <= limit,
        )
        for a in parsed.attachments
    )


def _acknowledge(ticket: Ticket) -> Message | None:
    """Confirm a new mail ticket with its number; rate-limited per address as a loop breaker."""
    if not settings.PORTAL_TICKET_ACKNOWLEDGE or not ticket.requester_email:
        return None
    since = timezone.now() - timedelta(hours=1)
    recent = Message.objects.filter(
        kind=MessageKind.OUTBOUND,
        is_automatic=True,
        to_email__iexact=ticket.requester_email,
        created_at__gte=since,
    ).count()
    if recent >= settings.PORTAL_TICKET_ACK_PER_HOUR:
        return None
    texts = []
    for language in ("en", "de"):
        with translation.override(language):
            texts.append(
                _(
                    "We have received your request and filed it as ticket %(number)s. "
                    "Keep %(tag)s in the subject when you write about it again."
                )
                % {"number": ticket.number, "tag": ticket.subject_tag}
            )
    in_reply_to, references = _thread_headers(ticket)
    message = Message.objects.create(
        ticket=ticket,
        kind=MessageKind.OUTBOUND,
        to_email=ticket.requester_email,
        subject=_reply_subject(ticket),
        body_text="\n\n".join(texts),
        message_id=_msgid(ticket),
        in_reply_to=in_reply_to,
        references=references,
        is_automatic=True,
        automatic_reason="acknowledgement",
    )
    _send_after_commit(message)
    return message


def _current_incidents(requester_id: int | None) -> list[tuple[Incident, bool]]:
    """Current incidents, newest first, each with whether it affects the requester's building
    (from the mail batch when there is one)."""
    batch = _MAIL_BATCH.get()
    if (
        batch is not None
        and batch.incidents is not None
        and (requester_id is None or requester_id in batch.buildings)
    ):
        building = batch.buildings.get(requester_id) if requester_id else None
        return [(i, building is not None and building in b) for i, b in batch.incidents]
    building_id = None
    if requester_id:
        building_id = (
            django_apps.get_model("members", "Member")
            .objects.filter(user_id=requester_id, room__isnull=False)
            .values_list("room__building_id", flat=True)
            .first()
        )
    incidents = Incident.objects.current().order_by("-started_at")
    if building_id is not None:
        incidents = incidents.annotate(
            in_building=Exists(
                Incident.buildings.through.objects.filter(
                    incident_id=OuterRef("pk"), building_id=building_id
                )
            )
        )
    return [(i, getattr(i, "in_building", False)) for i in incidents]


def _incident_autolink(ticket: Ticket, text: str) -> Incident | None:
    """Link a new ticket to the newest current incident that affects the requester's building
    or whose keywords it mentions."""
    for incident, in_building in _current_incidents(ticket.requester_id):
        reason = ""
        if in_building:
            reason = "building"
        elif incident.matches(text):
            reason = "keywords"
        if reason:
            ticket.incident = incident
            ticket.save(update_fields=["incident", "updated_at"])
            _audit(
                actor=None,
                action="ticket.incident_link",
                obj=ticket,
                ticket=ticket,
                detail=f"auto ({reason}): {incident.title}",
            )
            return incident
    return None


@transaction.atomic
def inbound_dismiss(*, inbound: InboundMail, actor: Any) -> InboundMail:
    """Staff looked at a quarantined mail and decided it needs no ticket."""
    inbound.status = InboundStatus.DISMISSED
    inbound.handled_by = actor
    inbound.save(update_fields=["status", "handled_by"])
    _audit(actor=actor, action="mail.dismiss", obj=inbound)
    return inbound


@transaction.atomic
def ticket_sender_confirm(*, ticket: Ticket, actor: Any) -> Ticket:
    """Staff checked that an unverified mail really came from the member whose address it
    bears: the ticket becomes theirs (the member sees it, and its context shows beside it)."""
    ticket = Ticket.objects.select_for_update().get(pk=ticket.pk)
    if not ticket.sender_unverified:
        return ticket
    member = user_for_email(ticket.requester_email)
    if member is None:
        raise TicketError(
            _("No member has the address %(email)s any more.") % {"email": ticket.requester_email}
        )
    ticket.requester, ticket.sender_unverified = member, False
    ticket.save(update_fields=["requester", "sender_unverified", "updated_at"])
    _audit(actor=actor, action="ticket.sender_confirm", obj=ticket, ticket=ticket)
    return ticket


# --- tickets from people ---------------------------------------------------------------------


@transaction.atomic
def ticket_open(*, actor: Any, subject: str, body: str) -> Ticket:
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
def ticket_member_post(*, ticket: Ticket, actor: Any, body: str) -> Message:
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
    *, ticket: Ticket, actor: Any, body: str, status: str = TicketStatus.WAITING
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
def ticket_note(*, ticket: Ticket, actor: Any, body: str) -> Message:
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
    actor: Any,
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
    *, tickets: Iterable[Ticket], actor: Any, action: str, value: Any = None
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


# --- outbound mail ----------------------------------------------------------------------------


def _send_after_commit(message: Message) -> None:
    from workers.mail import ticket_message_send as ticket_message_send_task

    message_id = message.pk
    transaction.on_commit(lambda: ticket_message_send_task.delay(message_id))


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


# --- incidents --------------------------------------------------------------------------------


def _matching_q(keywords: list[str]) -> Q:
    condition = Q(pk__in=[])
    for keyword in (k.strip() for k in keywords):
        if keyword:
            body = Message.objects.filter(
                ticket=OuterRef("pk"), kind=MessageKind.INBOUND, body_text__icontains=keyword
            )
            condition |= Q(subject__icontains=keyword) | Q(Exists(body))
    return condition


def _clean_list(values: Iterable[str]) -> list[str]:
    return sorted({v.strip()[:80] for v in values if v and v.strip()})


@transaction.atomic
def incident_declare(
    *,
    actor: Any,
    title: str,
    description: str = "",
    severity: str = "major",
    affected: Iterable[str] = (),
    keywords: Iterable[str] = (),
    started_at: Any = None,
    public: bool = True,
    buildings: Iterable[Any] = (),
) -> Incident:
    """Declare an incident and link the active tickets since its start that mention it or
    come from members living in an affected building."""
    if not title.strip():
        raise TicketError(_("An incident needs a title."))
    incident = Incident.objects.create(
        title=title.strip()[:200],
        description=description.strip(),
        severity=severity,
        affected=_clean_list(affected),
        keywords=_clean_list(keywords),
        started_at=started_at or timezone.now(),
        public=public,
        created_by=actor,
    )
    if description.strip():
        IncidentUpdate.objects.create(incident=incident, body=description.strip(), author=actor)
    buildings = list(buildings)
    if buildings:
        incident.buildings.set(buildings)
    _audit(actor=actor, action="incident.declare", obj=incident)
    if incident.keywords or buildings:
        condition = _matching_q(incident.keywords)
        if buildings:
            condition |= Q(requester__member__room__building__in=buildings)
        candidates = Ticket.objects.filter(
            incident__isnull=True, status__in=ACTIVE_STATUSES, created_at__gte=incident.started_at
        ).filter(condition)
        incident_tickets_link(incident=incident, tickets=candidates, actor=actor, auto=True)
    transaction.on_commit(status_cache_refresh)
    if buildings and incident.public and django_apps.is_installed("apps.notifications"):
        # Thousands of members may live there: their notices are made by a task, never here.
        from workers.notifications import incident_notices_create as incident_notices_task

        incident_id = incident.pk
        transaction.on_commit(lambda: incident_notices_task.delay(incident_id))
    return incident


@transaction.atomic
def incident_update_post(
    *, incident: Incident, actor: Any, body: str, phase: str = IncidentPhase.INVESTIGATING
) -> IncidentUpdate:
    """A public update on an incident."""
    if not body.strip():
        raise TicketError(_("The update is empty."))
    update = IncidentUpdate.objects.create(
        incident=incident, body=body.strip(), phase=phase, author=actor
    )
    _audit(actor=actor, action="incident.update", obj=incident, detail=phase)
    transaction.on_commit(status_cache_refresh)
    return update


@transaction.atomic
def incident_end(*, incident: Incident, actor: Any, body: str = "") -> Incident:
    """End an incident (with a closing update)."""
    incident = Incident.objects.select_for_update().get(pk=incident.pk)
    if incident.ended_at is not None:
        return incident
    incident.ended_at = timezone.now()
    incident.save(update_fields=["ended_at"])
    IncidentUpdate.objects.create(
        incident=incident,
        phase=IncidentPhase.RESOLVED,
        body=body.strip() or _("The problem is solved."),
        author=actor,
    )
    _audit(actor=actor, action="incident.end", obj=incident)
    transaction.on_commit(status_cache_refresh)
    return incident


@transaction.atomic
def incident_tickets_link(
    *, incident: Incident | None, tickets: Iterable[Ticket], actor: Any, auto: bool = False
) -> int:
    """Link tickets to an incident by hand (or unlink with incident=None)."""
    count = 0
    for ticket in tickets:
        if ticket.incident_id == (incident.pk if incident else None):
            continue
        ticket.incident = incident
        ticket.save(update_fields=["incident", "updated_at"])
        label = incident.title if incident else "-"
        _audit(
            actor=actor,
            action="ticket.incident_link",
            obj=ticket,
            ticket=ticket,
            detail=("auto: " if auto else "") + label,
        )
        count += 1
    return count


def _requester_languages(tickets: list[Ticket]) -> dict[int, str]:
    """Each ticket's requester's chosen language ("" when none was chosen or no member wrote)."""
    if not django_apps.is_installed("apps.notifications"):
        return {}
    from apps.notifications.models import Preference

    users = {t.requester_id for t in tickets if t.requester_id}
    chosen = dict(
        Preference.objects.filter(member__user_id__in=users)
        .exclude(language="")
        .values_list("member__user_id", "language")
    )
    return {t.pk: chosen.get(t.requester_id, "") for t in tickets}


def mass_reply_languages(language: str, *, body_de: str) -> list[str]:
    """The languages a mass reply is written in for a requester who chose `language`: German
    only with a German text; both (as the portal's notice mails) when nothing was chosen."""
    if not body_de:
        return ["en"]
    if language in ("en", "de"):
        return [language]
    return ["en", "de"]


def mass_reply_text(
    *, ticket: Ticket, actor: Any, body: str, body_de: str = "", language: str = ""
) -> str:
    """The text `ticket` receives, each language's part filled in that language."""
    texts = {"en": body, "de": body_de}
    parts = []
    for code in mass_reply_languages(language, body_de=body_de):
        with translation.override(code):
            parts.append(placeholders_fill(texts[code], ticket=ticket, actor=actor))
    return "\n\n-- \n\n".join(parts)


def _mass_reply_texts(
    tickets: list[Ticket], *, actor: Any, body: str, body_de: str
) -> list[tuple[Ticket, str, str]]:
    """(ticket, its languages such as "en+de", the text it receives) for each ticket."""
    chosen = _requester_languages(tickets)
    rows = []
    for ticket in tickets:
        language = chosen.get(ticket.pk, "")
        kind = "+".join(mass_reply_languages(language, body_de=body_de))
        text = mass_reply_text(
            ticket=ticket, actor=actor, body=body, body_de=body_de, language=language
        )
        rows.append((ticket, kind, text))
    return rows


def _mass_reply_tickets(incident: Incident) -> QuerySet[Ticket]:
    return (
        Ticket.objects.filter(incident=incident, status__in=ACTIVE_STATUSES)
        .select_related("requester")
        .order_by("pk")
    )


@dataclass(frozen=True)
class MassReplyPreview:
    """What a mass reply would do: how many tickets, in which languages, one text of each."""

    count: int
    languages: dict[str, int]  # "en", "de", "en+de" -> tickets
    examples: list[tuple[Ticket, str]]  # one ticket per kind of text, and what it would get


def incident_mass_reply_preview(
    *, incident: Incident, actor: Any, body: str, body_de: str = ""
) -> MassReplyPreview:
    """Render the reply for real tickets of the incident without sending or storing anything."""
    body, body_de = body.strip(), body_de.strip()
    counts: dict[str, int] = {}
    examples: list[tuple[Ticket, str]] = []
    rows = _mass_reply_texts(
        list(_mass_reply_tickets(incident)), actor=actor, body=body, body_de=body_de
    )
    for ticket, kind, text in rows:
        counts[kind] = counts.get(kind, 0) + 1
        if counts[kind] == 1:
            examples.append((ticket, text))
    return MassReplyPreview(count=len(rows), languages=counts, examples=examples)


@transaction.atomic
def incident_mass_reply(
    *, incident: Incident, actor: Any, body: str, body_de: str = "", solve: bool = False
) -> IncidentBroadcast:
    """Answer every active linked ticket at once: one message per ticket, in its own thread,
    in its requester's language when a German text is given.

    The messages are written here, once (unique per ticket and broadcast); the task only
    mails the unsent ones, so retries cannot answer a ticket twice.
    """
    body, body_de = body.strip(), body_de.strip()
    if not body:
        raise TicketError(_("The reply is empty."))
    broadcast = IncidentBroadcast.objects.create(
        incident=incident, body=body, body_de=body_de, solve=solve, created_by=actor
    )
    tickets = list(_mass_reply_tickets(incident).select_for_update(of=("self",)))
    thread: dict[int, list[Message]] = {t.pk: [] for t in tickets}
    for m in (
        Message.objects.filter(ticket__in=tickets)
        .exclude(kind=MessageKind.NOTE)
        .exclude(message_id="")
        .order_by("created_at", "id")
        .only("ticket_id", "message_id", "kind")
    ):
        thread[m.ticket_id].append(m)
    now = timezone.now()
    messages = []
    for ticket, _kind, text in _mass_reply_texts(tickets, actor=actor, body=body, body_de=body_de):
        in_reply_to, references = _thread_headers(ticket, thread[ticket.pk])
        messages.append(
            Message(
                ticket=ticket,
                kind=MessageKind.OUTBOUND,
                author=actor,
                from_name=actor.get_full_name(),
                to_email=ticket.requester_email,
                subject=_reply_subject(ticket),
                body_text=text,
                message_id=_msgid(ticket),
                in_reply_to=in_reply_to,
                references=references,
                broadcast=broadcast,
                created_at=now,
            )
        )
        ticket.status = TicketStatus.SOLVED if solve else TicketStatus.WAITING
        ticket.solved_at = now if solve else None
        ticket.first_response_at = ticket.first_response_at or now
        ticket.last_message_at = now
        ticket.updated_at = now
    Message.objects.bulk_create(messages)
    Ticket.objects.bulk_update(
        tickets, ["status", "solved_at", "first_response_at", "last_message_at", "updated_at"]
    )
    TicketEvent.objects.bulk_create(
        TicketEvent(ticket=t, actor=actor, action="ticket.mass_reply", detail=incident.title[:300])
        for t in tickets
    )
    _audit(
        actor=actor, action="incident.mass_reply", obj=incident, detail=f"{len(tickets)} tickets"
    )
    from workers.mail import incident_broadcast_send as incident_broadcast_send_task

    broadcast_id = broadcast.pk
    transaction.on_commit(lambda: incident_broadcast_send_task.delay(broadcast_id))
    return broadcast


@transaction.atomic
def incident_tickets_solve(*, incident: Incident, actor: Any) -> int:
    """Mark every active ticket of the incident solved (no mail; see incident_mass_reply)."""
    tickets = list(
        Ticket.objects.select_for_update().filter(incident=incident, status__in=ACTIVE_STATUSES)
    )
    now = timezone.now()
    for ticket in tickets:
        ticket.status, ticket.solved_at, ticket.updated_at = TicketStatus.SOLVED, now, now
    Ticket.objects.bulk_update(tickets, ["status", "solved_at", "updated_at"])
    TicketEvent.objects.bulk_create(
        TicketEvent(
            ticket=t, actor=actor, action="ticket.update", detail="status=solved (incident)"
        )
        for t in tickets
    )
    _audit(
        actor=actor, action="incident.solve_tickets", obj=incident, detail=f"{len(tickets)} tickets"
    )
    return len(tickets)
