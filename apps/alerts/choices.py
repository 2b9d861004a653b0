"""Choices of the alerts app: what kind of trouble an alert says, and whether it is an outage."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class AlertClass(models.TextChoices):
    """What an alert is about. The first six are outages (public incidents); the rest are
    warnings for the staff only."""

    NO_PRIMARY = "no_primary", _("no firewall of the pair is primary")
    UNREACHABLE = "unreachable", _("both firewalls unreachable")
    CONNTRACK = "conntrack", _("connection table full or dropping")
    SOFTIRQ = "softirq", _("firewall overloaded (softirq)")
    DHCP = "dhcp", _("DHCP not answering")
    PUSH = "push", _("firewall change stuck or rolled back")
    BACKUP_DOWN = "backup_down", _("one firewall down, the other serving")
    SYNC_LOSS = "sync_loss", _("state sync losing messages")
    OTHER = "other", _("other warning")


OUTAGE_CLASSES = frozenset(
    {
        AlertClass.NO_PRIMARY,
        AlertClass.UNREACHABLE,
        AlertClass.CONNTRACK,
        AlertClass.SOFTIRQ,
        AlertClass.DHCP,
        AlertClass.PUSH,
    }
)

# The alert rules of deploy/prometheus/portal.rules.yml and the class each one means. An alert
# not named here is a staff warning of class OTHER: it never opens a public incident.
RULE_CLASSES: dict[str, str] = {
    "FailoverNoPrimary": AlertClass.NO_PRIMARY,
    "FirewallPairUnreachable": AlertClass.UNREACHABLE,
    "ConntrackTableFull": AlertClass.CONNTRACK,
    "ConntrackDropping": AlertClass.CONNTRACK,
    "SoftirqSaturated": AlertClass.SOFTIRQ,
    "DhcpNotAnswering": AlertClass.DHCP,
    "FirewallPushStuck": AlertClass.PUSH,
    "FirewallPushRolledBack": AlertClass.PUSH,
    "FirewallHostUnreachable": AlertClass.BACKUP_DOWN,
    "FirewallHostFault": AlertClass.BACKUP_DOWN,
    "StateSyncLosingMessages": AlertClass.SYNC_LOSS,
}


class GroupState(models.TextChoices):
    """Where an alert group stands."""

    FIRING = "firing", _("firing")
    RESOLVED = "resolved", _("resolved, holding down")
    SETTLED = "settled", _("working again, waiting for a person")
    QUIET = "quiet", _("quiet")
