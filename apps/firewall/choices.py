"""Choices of the firewall app."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class PushStatus(models.TextChoices):
    """Where a host stands with the newest rule set (OpenWISP's config status)."""

    PENDING = "pending", _("pending")
    APPLIED = "applied", _("applied")
    ERROR = "error", _("error")
    UNREACHABLE = "unreachable", _("unreachable")


class PushStep(models.TextChoices):
    """The steps of a push, in order; the log names the one that failed."""

    CONNECT = "connect", _("connect")
    CHECK = "check", _("check")
    APPLY = "apply", _("apply")
    SHAPING = "shaping", _("apply shaping")
    VERIFY = "verify", _("verify version")
    HEALTH = "health", _("health")
    CONFIRM = "confirm", _("confirm")
    ROLLBACK = "rollback", _("roll back")


class ShapingRoot(models.TextChoices):
    """Root qdisc of a host's shaping interfaces (workers.ruleset.ShapingRoot)."""

    HTB = "htb", _("one HTB (exact; one core enqueues)")
    MQ = "mq", _("mq with one HTB per transmit queue (scales over cores)")


class SiteStatus(models.TextChoices):
    """Where a site's rollout stands."""

    IDLE = "idle", _("in sync")
    ROLLING_OUT = "rolling_out", _("rolling out")
    FAILED = "failed", _("stopped")
