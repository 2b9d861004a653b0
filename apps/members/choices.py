from django.db import models
from django.utils.translation import gettext_lazy as _


class MemberStatus(models.TextChoices):
    """Where a membership stands; only active and test access reach the Internet."""

    PENDING = "pending", _("Pending check-in")
    ACTIVE = "active", _("Active")
    TEST = "test", _("Test access")
    SUSPENDED = "suspended", _("Suspended")
    ENDED = "ended", _("Ended")


# Statuses that hold a public IPv4 address (suspended members keep theirs until they end).
HOLDS_PUBLIC_IPV4 = (MemberStatus.ACTIVE, MemberStatus.TEST, MemberStatus.SUSPENDED)

# Statuses whose devices reach the Internet: the firewalls carry their addresses, forwards and
# openings (apps/firewall/snapshot.py), and their pages say whether a row is live.
NETWORKED_STATUSES = (MemberStatus.ACTIVE, MemberStatus.TEST)
