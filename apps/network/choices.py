"""Choices of the network app (stored values match the compiler's enums 1:1)."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class Protocol(models.TextChoices):
    """Transport protocol of a forward, an opening or a blocked port (compiler: Protocol)."""

    TCP = "tcp", "TCP"
    UDP = "udp", "UDP"
    BOTH = "both", _("TCP and UDP")


class Direction(models.TextChoices):
    """Which way a blocked port range applies."""

    INBOUND = "inbound", _("Inbound (from the Internet)")
    OUTBOUND = "outbound", _("Outbound (from members)")


class LiveStatus(models.TextChoices):
    """Whether the firewalls enforce a row (docs/live-state.md)."""

    LIVE = "live", _("live")
    PENDING = "pending", _("pending")
    FAILED = "failed", _("failed")
    OFF = "off", _("not in force")
