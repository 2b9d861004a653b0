"""Choices of the notifications app."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class NoticeKind(models.TextChoices):
    """What a notice is about; preferences and the mail rate limit are per kind."""

    LIVE = "live", _("A device, port forward or IPv6 opening failed to go live or went live late")
    TEST_ACCESS = "test_access", _("My test access ends soon")
    INCIDENT = "incident", _("An outage or disruption in my building")
    TRAFFIC = "traffic", _("Monthly traffic summary")

    @classmethod
    def mail_default(cls, kind: str) -> bool:
        """Mail is on for every kind except the optional monthly summary."""
        return kind != cls.TRAFFIC


class MailStatus(models.TextChoices):
    """Where a notice stands with its mail (the notice itself is always shown)."""

    PENDING = "pending", _("waiting to be mailed")
    SENT = "sent", _("mailed")
    OFF = "off", _("not mailed (turned off)")
    NO_ADDRESS = "no_address", _("not mailed (no address)")


class LiveWhat(models.TextChoices):
    """The rows whose live state is watched."""

    DEVICE = "device", _("device")
    FORWARD = "forward", _("port forward")
    OPENING = "opening", _("IPv6 opening")


class LiveOutcome(models.TextChoices):
    """How a watched change ended, as far as notices care."""

    ON_TIME = "on_time", _("live in time")
    LATE = "late", _("live late")
    FAILED = "failed", _("failed")
    OFF = "off", _("not in force")
