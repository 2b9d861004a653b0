"""Health samples of the firewall hosts: a bounded time series per host."""

from __future__ import annotations

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class HostHealthSample(models.Model):
    """What one health collection read from one firewall host (or why it could not)."""

    host = models.ForeignKey(
        "firewall.FirewallHost", on_delete=models.CASCADE, related_name="health_samples"
    )
    at = models.DateTimeField(_("time"), default=timezone.now)
    reachable = models.BooleanField(_("reachable"))
    latency_ms = models.FloatField(_("latency (ms)"), null=True, blank=True)
    loaded_version = models.CharField(_("loaded version"), max_length=128, blank=True)
    conntrack_count = models.PositiveIntegerField(null=True, blank=True)
    conntrack_max = models.PositiveIntegerField(null=True, blank=True)
    softirq_max_share = models.FloatField(null=True, blank=True)
    softirq_per_cpu = models.JSONField(default=list, blank=True)
    load1 = models.FloatField(null=True, blank=True)
    interfaces = models.JSONField(default=dict, blank=True)
    digest = models.CharField(_("content digest"), max_length=64, blank=True)
    # The pair's failover on this host (portal-fw health "ha"): VRRP state per instance,
    # keepalived and conntrackd running, conntrackd's sync statistics. Empty: not one of a pair.
    ha = models.JSONField(_("failover state"), default=dict, blank=True)
    # /proc/net/stat/nf_conntrack summed over CPUs (drop, early_drop, insert_failed, invalid)
    # and who hit a conntrack quota in the last hour ([{"address", "packets"}], most first).
    conntrack_stats = models.JSONField(_("conntrack statistics"), default=dict, blank=True)
    quota_hits = models.JSONField(_("conntrack quota hits"), default=list, blank=True)
    # Kea on this host (portal-fw health "dhcp"): {"answering", "requests", "answers", "error"};
    # empty: the host runs no Kea for the portal.
    dhcp = models.JSONField(_("DHCP state"), default=dict, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["host", "-at"])]
        verbose_name = _("health sample")
        verbose_name_plural = _("health samples")

    def __str__(self) -> str:
        return f"{self.host_id} {self.at:%Y-%m-%d %H:%M:%S}"

    @property
    def conntrack_ratio(self) -> float | None:
        """How full the conntrack table is (0..1)."""
        if self.conntrack_count is None or not self.conntrack_max:
            return None
        return self.conntrack_count / self.conntrack_max
