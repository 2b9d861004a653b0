"""Kinds of address holders and the verdicts of a lookup."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class HolderKind(models.TextChoices):
    """What kind of address a holding is about (and so who can hold it)."""

    PUBLIC_IPV4 = "public_ipv4", _("public IPv4 of a member")
    PRIVATE_IPV4 = "private_ipv4", _("private IPv4 of a device")
    IPV6 = "ipv6", _("IPv6 address of a device")
    LEASE = "lease", _("DHCP lease in a registration range")


class HoldingState(models.TextChoices):
    """Held by someone, or resting in quarantine after its holder gave it back."""

    HELD = "held", _("held")
    QUARANTINED = "quarantined", _("quarantined")


class Verdict(models.TextChoices):
    """The plain answer to "who had this address then?"."""

    HELD = "held", _("held")
    QUARANTINED = "quarantined", _("quarantined")
    NOBODY = "nobody", _("nobody")


class HoldingSource(models.TextChoices):
    """Where a holding row came from (evidence: recorded live, or reconstructed later)."""

    RECORDED = "recorded", _("recorded when it happened")
    AUDIT = "audit", _("reconstructed from the audit trail")
    CURRENT = "current", _("reconstructed from the current state")
    DHCP = "dhcp", _("DHCP lease read from a host")
