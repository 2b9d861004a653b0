"""Inbound mail: store it, parse it, thread it into a ticket (or open one, or quarantine it),
acknowledge it; staff dismiss mails and confirm unverified senders."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.apps import apps as django_apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DatabaseError, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone, translation
from django.utils.crypto import constant_time_compare
from django.utils.translation import gettext as _

from apps.tickets.choices import InboundStatus, MessageKind, TicketChannel, TicketStatus
from apps.tickets.mailparse import MailParseError, ParsedMail, parse_mail
from apps.tickets.models import Attachment, InboundMail, Incident, Message, Queue, Ticket
from apps.tickets.selectors import user_for_email
from apps.tickets.services.helpers import (
    SUBJECT_TAG,
    TicketError,
    _audit,
    _msgid,
    _reply_subject,
    _thread_headers,
)
from apps.tickets.services.outbound import _send_after_commit

if TYPE_CHECKING:
    from django.contrib.auth.models import User

log = logging.getLogger("apps.tickets.services")  # the name it logged under before the split


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


def queue_default() -> Queue:
    """The queue new tickets land in (looked up once per batch of received mail)."""
    batch = _MAIL_BATCH.get()
    if batch is not None and batch.queue is not None:
        return batch.queue
    queue, _created = Queue.objects.get_or_create(slug="support", defaults={"name": "Support"})
    if batch is not None:
        batch.queue = queue
    return queue


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
        verify_dkim=settings.PORTAL_MAIL_VERIFY_DKIM,
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
                verify_dkim=settings.PORTAL_MAIL_VERIFY_DKIM,
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
def inbound_dismiss(*, inbound: InboundMail, actor: User) -> InboundMail:
    """Staff looked at a quarantined mail and decided it needs no ticket."""
    inbound.status = InboundStatus.DISMISSED
    inbound.handled_by = actor
    inbound.save(update_fields=["status", "handled_by"])
    _audit(actor=actor, action="mail.dismiss", obj=inbound)
    return inbound


@transaction.atomic
def ticket_sender_confirm(*, ticket: Ticket, actor: User) -> Ticket:
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
