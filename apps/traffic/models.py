"""Traffic per member: the hosts' counter totals as last read, and the buckets they feed.

Each firewall host counts what crosses its uplink per accounting key (a device IPv4, a member's
IPv6 /64, an address in a shared /64; the rule set's acct* sets) and reports totals since an
epoch. `TrafficCounter` keeps the last total per host and key, so a collection stores only the
difference (read twice, counted once); each packet crosses one host of a pair, so the hosts'
differences add up without double counting, also across a failover.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class TrafficCounter(models.Model):
    # No index of its own: the unique key begins with the host.
    host = models.ForeignKey(
        "firewall.FirewallHost",
        on_delete=models.CASCADE,
        related_name="traffic_counters",
        db_index=False,
    )
    set_name = models.CharField(max_length=16)  # acct4_in, acct6n_out, ...
    key = models.CharField(max_length=48)  # an address or a /64's network address
    epoch = models.CharField(max_length=32)
    packets = models.BigIntegerField()
    octets = models.BigIntegerField()
    seen_at = models.DateTimeField()
    # Who held the key at the last reading that changed its total: a key nobody holds now (a
    # device removed since, its bytes carried by the host) is attributed to them. Plain ids,
    # no foreign keys: a member's removal does not touch this table (the store checks that
    # the member still exists), and the counter rows stay out of the members' deletes.
    last_member_id = models.BigIntegerField(null=True, blank=True)
    last_device_id = models.IntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["host", "set_name", "key"], name="traffic_counter_key")
        ]

    def __str__(self) -> str:
        return f"{self.set_name} {self.key}: {self.octets} B"


class Span(models.TextChoices):
    HOUR = "h", _("hour")
    DAY = "d", _("day")


class TrafficBucket(models.Model):
    """Bytes and packets of one member (one device where the rule set tells devices apart,
    device_id 0 otherwise) at one site in one hour, or one day once rolled up."""

    # No index of its own: the unique key and traffic_bucket_member begin with the member.
    member = models.ForeignKey(
        "members.Member", on_delete=models.CASCADE, related_name="traffic_buckets", db_index=False
    )
    device_id = models.IntegerField(default=0)  # not a key: the history outlives the device
    site = models.ForeignKey("firewall.Site", on_delete=models.CASCADE, related_name="+")
    start = models.DateTimeField()
    span = models.CharField(max_length=1, choices=Span.choices, default=Span.HOUR)
    bytes_in = models.BigIntegerField(default=0)  # downloaded (towards the member)
    bytes_out = models.BigIntegerField(default=0)  # uploaded
    packets_in = models.BigIntegerField(default=0)
    packets_out = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["member", "device_id", "site", "start", "span"], name="traffic_bucket_key"
            )
        ]
        indexes = [
            models.Index(fields=["span", "start"], name="traffic_bucket_time"),
            models.Index(fields=["member", "start"], name="traffic_bucket_member"),
        ]

    def __str__(self) -> str:
        return f"member #{self.member_id} {self.start:%Y-%m-%d %H:%M} ({self.span})"
