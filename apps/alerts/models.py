"""Alerts from Alertmanager: each alert once (resends update it), grouped by place and class."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from apps.alerts.choices import OUTAGE_CLASSES, AlertClass, GroupState


class AlertGroup(models.Model):
    """The alerts of one class at one place (a site, or "" for the whole network): it opens
    at most one incident per episode, however often its alerts fire and resolve."""

    scope = models.CharField(_("place"), max_length=64, blank=True)  # the site's name, or ""
    site = models.ForeignKey(
        "firewall.Site", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    klass = models.CharField(_("class"), max_length=16, choices=AlertClass.choices)
    state = models.CharField(
        _("state"), max_length=16, choices=GroupState.choices, default=GroupState.QUIET
    )
    fired_at = models.DateTimeField(_("firing since"), null=True, blank=True)
    resolved_at = models.DateTimeField(_("resolved at"), null=True, blank=True)
    incident = models.ForeignKey(
        "tickets.Incident",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="alert_groups",
    )
    # A person said "not an outage": the group opens nothing until its alerts resolve.
    not_outage = models.BooleanField(_("not an outage"), default=False)
    not_outage_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    labels = models.JSONField(_("labels"), default=dict, blank=True)
    summary = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-fired_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["scope", "klass"], name="alerts_group_one_per_class")
        ]

    def __str__(self) -> str:
        return f"{self.scope or 'network'}/{self.klass}"

    @property
    def is_outage(self) -> bool:
        return self.klass in OUTAGE_CLASSES


class Alert(models.Model):
    """One alert as Alertmanager knows it: its fingerprint and start name it, so a resend
    updates this row instead of adding one."""

    group = models.ForeignKey(AlertGroup, on_delete=models.CASCADE, related_name="alerts")
    fingerprint = models.CharField(max_length=64)
    alertname = models.CharField(max_length=120)
    status = models.CharField(max_length=8)  # firing / resolved, as Alertmanager says
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(null=True, blank=True)
    labels = models.JSONField(default=dict)
    received_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-starts_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["fingerprint", "starts_at"], name="alerts_alert_once_per_start"
            )
        ]
        indexes = [models.Index(fields=["group", "status"])]

    def __str__(self) -> str:
        return f"{self.alertname} {self.fingerprint} {self.status}"


class AlertSubscription(models.Model):
    """A staff member who asked to be mailed the warnings that are not outages."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="alert_subscription"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return str(self.user)
