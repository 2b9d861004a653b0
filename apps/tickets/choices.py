"""Choices of the tickets app."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class TicketStatus(models.TextChoices):
    """Where a ticket stands; solved tickets reopen on a reply, closed ones do not."""

    NEW = "new", _("New")
    OPEN = "open", _("Open")
    WAITING = "waiting", _("Waiting for member")
    SOLVED = "solved", _("Solved")
    CLOSED = "closed", _("Closed")


ACTIVE_STATUSES = (TicketStatus.NEW, TicketStatus.OPEN, TicketStatus.WAITING)


class TicketChannel(models.TextChoices):
    MAIL = "mail", _("Mail")
    PORTAL = "portal", _("Portal")
    STAFF = "staff", _("Staff")


class MessageKind(models.TextChoices):
    INBOUND = "inbound", _("From the member")
    OUTBOUND = "outbound", _("Reply")
    NOTE = "note", _("Internal note")


class InboundStatus(models.TextChoices):
    """What became of one received mail; nothing leaves `received` without a trace."""

    RECEIVED = "received", _("Received")
    PROCESSED = "processed", _("Processed")
    DUPLICATE = "duplicate", _("Duplicate")
    QUARANTINED = "quarantined", _("Quarantined")
    DISMISSED = "dismissed", _("Dismissed")


class IncidentPhase(models.TextChoices):
    """The label of an incident update, as status pages usually word it."""

    INVESTIGATING = "investigating", _("Investigating")
    IDENTIFIED = "identified", _("Identified")
    MONITORING = "monitoring", _("Monitoring")
    RESOLVED = "resolved", _("Resolved")


class IncidentSeverity(models.TextChoices):
    MINOR = "minor", _("Degraded")
    MAJOR = "major", _("Partial outage")
    CRITICAL = "critical", _("Outage")
