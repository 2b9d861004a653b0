"""Tickets, their messages, incidents and the mail ledger."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.utils import formats, timezone
from django.utils.crypto import salted_hmac
from django.utils.translation import gettext_lazy as _

from apps.accounts.roles import Role, has_role
from apps.tickets.choices import (
    ACTIVE_STATUSES,
    InboundStatus,
    IncidentPhase,
    IncidentSeverity,
    MessageKind,
    TicketChannel,
    TicketStatus,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _is_support(actor: User) -> bool:
    return has_role(actor, Role.SUPPORT)


class Queue(models.Model):
    """A group of tickets worked by the same people (general support, abuse, billing...)."""

    slug = models.SlugField(_("slug"), unique=True)
    name = models.CharField(_("name"), max_length=80)

    class Meta:
        ordering = ["name"]
        verbose_name = _("queue")
        verbose_name_plural = _("queues")

    def __str__(self) -> str:
        return self.name


def in_reader_language(en: str, de: str) -> str:
    """The German text for a German reader when one was written, else the English one."""
    from django.utils.translation import get_language

    return de if de and (get_language() or "").startswith("de") else en


class IncidentQuerySet(models.QuerySet):
    def current(self) -> IncidentQuerySet:
        """Incidents that have started and not ended."""
        return self.filter(ended_at__isnull=True, started_at__lte=timezone.now())


class Incident(models.Model):
    """An outage or degradation; collects the tickets it causes and answers them at once."""

    title = models.CharField(_("title"), max_length=200)
    # The German title, when the incident was written in both languages (opened by an alert).
    title_de = models.CharField(_("title (German)"), max_length=200, blank=True, db_default="")
    description = models.TextField(_("description"), blank=True)
    severity = models.CharField(
        _("severity"), max_length=16, choices=IncidentSeverity, default=IncidentSeverity.MAJOR
    )
    # Affected buildings are real buildings (their members' tickets are linked automatically);
    # services without a row of their own (Wi-Fi, mail, VPN) stay free-text tags.
    buildings = models.ManyToManyField(
        "members.Building",
        blank=True,
        related_name="incidents",
        verbose_name=_("affected buildings"),
    )
    affected = ArrayField(
        models.CharField(max_length=80),
        default=list,
        blank=True,
        verbose_name=_("affected services"),
    )
    keywords = ArrayField(models.CharField(max_length=80), default=list, blank=True)
    public = models.BooleanField(_("shown on the status page"), default=True)
    started_at = models.DateTimeField(_("started"), default=timezone.now)
    ended_at = models.DateTimeField(_("ended"), null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = IncidentQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]
        verbose_name = _("incident")
        verbose_name_plural = _("incidents")
        indexes = [models.Index(fields=["ended_at", "started_at"])]
        constraints = [
            # Year 1 in the portal's zone is stored as a BC date that no page can read back
            # (apps/core/moments.py bounds what people type; this is the last word).
            models.CheckConstraint(
                condition=models.Q(
                    started_at__gte=datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
                ),
                name="incident_started_sane",
            ),
        ]

    def __str__(self) -> str:
        return self.title

    @property
    def number(self) -> str:
        return f"#{self.pk}"

    @property
    def choice_label(self) -> str:
        """How pickers name it, since titles repeat ("Wi-Fi down"): "#12 · 11/25/2026 · title"."""
        day = formats.date_format(timezone.localtime(self.started_at), "SHORT_DATE_FORMAT")
        return f"{self.number} · {day} · {self.title}"

    @property
    def is_open(self) -> bool:
        return self.ended_at is None

    def matches(self, text: str) -> bool:
        """True when `text` contains one of the keywords (case-insensitive)."""
        lowered = text.lower()
        return any(k.strip() and k.strip().lower() in lowered for k in self.keywords)

    @property
    def display_title(self) -> str:
        """The title in the reader's language (German when written, else English)."""
        return in_reader_language(self.title, self.title_de)


class IncidentUpdate(models.Model):
    """One public update on an incident ("we found the cause", "fixed, monitoring")."""

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="updates")
    phase = models.CharField(
        _("phase"), max_length=16, choices=IncidentPhase, default=IncidentPhase.INVESTIGATING
    )
    body = models.TextField(_("text"))
    body_de = models.TextField(_("text (German)"), blank=True, db_default="")
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.incident_id}: {self.get_phase_display()}"

    @property
    def display_body(self) -> str:
        """The text in the reader's language (German when written, else English)."""
        return in_reader_language(self.body, self.body_de)


class TicketQuerySet(models.QuerySet):
    def visible_to(self, actor: User) -> TicketQuerySet:
        """Support and admins see every ticket; everyone else only the tickets they requested."""
        if not getattr(actor, "is_authenticated", False):
            return self.none()
        if _is_support(actor):
            return self
        return self.filter(requester=actor)

    def active(self) -> TicketQuerySet:
        return self.filter(status__in=ACTIVE_STATUSES)


class Ticket(models.Model):
    """A support request: from a member or a bare e-mail address, with a thread of messages."""

    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="tickets",
        verbose_name=_("requester"),
    )
    requester_email = models.EmailField(_("requester e-mail"), blank=True)
    requester_name = models.CharField(_("requester name"), max_length=200, blank=True)
    subject = models.CharField(_("subject"), max_length=300)
    status = models.CharField(
        _("status"), max_length=16, choices=TicketStatus, default=TicketStatus.NEW
    )
    channel = models.CharField(max_length=8, choices=TicketChannel, default=TicketChannel.MAIL)
    queue = models.ForeignKey(
        Queue, null=True, blank=True, on_delete=models.SET_NULL, verbose_name=_("queue")
    )
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="assigned_tickets",
        verbose_name=_("assignee"),
    )
    tags = ArrayField(models.CharField(max_length=40), default=list, blank=True)
    incident = models.ForeignKey(
        Incident,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="tickets",
        verbose_name=_("incident"),
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_message_at = models.DateTimeField(default=timezone.now)
    first_response_at = models.DateTimeField(null=True, blank=True)
    solved_at = models.DateTimeField(null=True, blank=True)
    # Mail from a member's address that carried no reference of theirs and no trusted proof of
    # its sender: not linked to the member until staff confirm who wrote it.
    sender_unverified = models.BooleanField(_("sender not verified"), default=False)

    objects = TicketQuerySet.as_manager()

    class Meta:
        ordering = ["-last_message_at", "-id"]
        verbose_name = _("ticket")
        verbose_name_plural = _("tickets")
        indexes = [
            models.Index(fields=["status", "-last_message_at"]),
            models.Index(fields=["requester_email"]),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.subject}"

    @property
    def number(self) -> str:
        return f"#{self.pk}"

    @property
    def reply_token(self) -> str:
        """A secret per ticket (derived from SECRET_KEY): whoever quotes it in a subject has
        read a mail about this ticket, unlike the guessable number."""
        return salted_hmac("apps.tickets.reply_token", str(self.pk)).hexdigest()[:10]

    @property
    def subject_tag(self) -> str:
        """The tag in mail subjects that threads a reply back here: "[#12:3fa9c01b2e]"."""
        return f"[#{self.pk}:{self.reply_token}]"

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def first_response_seconds(self) -> float | None:
        if self.first_response_at is None:
            return None
        return (self.first_response_at - self.created_at).total_seconds()

    @property
    def requester_display(self) -> str:
        if self.requester_id and self.requester.get_full_name():
            return self.requester.get_full_name()
        return self.requester_name or self.requester_email


class IncidentBroadcast(models.Model):
    """One mass reply to every ticket of an incident; its messages are created once."""

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="broadcasts")
    body = models.TextField()
    # Sent instead of `body` to requesters who chose German (empty: everyone gets `body`).
    body_de = models.TextField(blank=True)
    solve = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"broadcast {self.pk} of incident {self.incident_id}"


class Message(models.Model):
    """One message of a ticket's thread: inbound mail or portal post, outbound reply, or note."""

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="messages")
    kind = models.CharField(max_length=8, choices=MessageKind)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    from_email = models.CharField(max_length=320, blank=True)
    from_name = models.CharField(max_length=200, blank=True)
    to_email = models.CharField(max_length=320, blank=True)
    subject = models.CharField(max_length=300, blank=True)
    body_text = models.TextField(blank=True)
    # Kept for reference only; never rendered as HTML (body_text is derived from it).
    body_html = models.TextField(blank=True)
    message_id = models.CharField(max_length=500, blank=True, db_index=True)
    in_reply_to = models.CharField(max_length=500, blank=True)
    references = models.TextField(blank=True)
    is_automatic = models.BooleanField(default=False)
    automatic_reason = models.CharField(max_length=80, blank=True)
    broadcast = models.ForeignKey(
        IncidentBroadcast, null=True, blank=True, on_delete=models.SET_NULL, related_name="messages"
    )
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)
    send_attempts = models.PositiveSmallIntegerField(default=0)
    send_error = models.TextField(blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            # A mass reply reaches every ticket at most once, however often the task runs.
            models.UniqueConstraint(
                fields=["ticket", "broadcast"],
                condition=Q(broadcast__isnull=False),
                name="tickets_message_one_per_broadcast",
            ),
        ]
        indexes = [models.Index(fields=["ticket", "created_at"])]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} on #{self.ticket_id}"

    @property
    def is_public(self) -> bool:
        return self.kind != MessageKind.NOTE


class Attachment(models.Model):
    """A file that came with a message; stored in PostgreSQL (the only shared state) up to a limit."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="attachments")
    filename = models.CharField(max_length=255)
    content_type = models.CharField(max_length=120)
    size = models.PositiveIntegerField()
    data = models.BinaryField(blank=True)
    stored = models.BooleanField(default=True, help_text="False when it exceeded the size limit.")

    def __str__(self) -> str:
        return self.filename


class InboundMail(models.Model):
    """Every mail received, raw, before it is parsed: the ledger that makes losses visible."""

    received_at = models.DateTimeField(default=timezone.now, db_index=True)
    source = models.CharField(max_length=16, default="smtp")
    envelope_from = models.CharField(max_length=320, blank=True)
    envelope_to = models.TextField(blank=True)
    raw = models.BinaryField()
    size = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, choices=InboundStatus, default=InboundStatus.RECEIVED)
    error = models.TextField(blank=True)
    message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    handled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-received_at", "-id"]
        indexes = [models.Index(fields=["status", "-received_at"])]

    def __str__(self) -> str:
        return f"mail {self.pk} ({self.status})"


class CannedResponse(models.Model):
    """A prepared answer; placeholders such as {first_name} and {ticket_number} are filled in."""

    title = models.CharField(_("title"), max_length=120, unique=True)
    body = models.TextField(_("text"))
    # The same answer in German: a ticket whose requester reads German gets it (else English).
    body_de = models.TextField(_("text (German)"), blank=True, db_default="")
    queue = models.ForeignKey(
        Queue, null=True, blank=True, on_delete=models.SET_NULL, verbose_name=_("queue")
    )

    class Meta:
        ordering = ["title"]
        verbose_name = _("canned response")
        verbose_name_plural = _("canned responses")

    def __str__(self) -> str:
        return self.title

    def body_for(self, language: str) -> str:
        """The text for a reader of `language` ("de": the German one when written)."""
        return self.body_de if self.body_de and language.startswith("de") else self.body


class TicketEvent(models.Model):
    """The ticket's own history (status, assignee, links), shown beside the thread."""

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="events")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    action = models.CharField(max_length=40)
    detail = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.action} on #{self.ticket_id}"
