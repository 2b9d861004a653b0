"""The alert groups on the staff's pages: the incident they opened, and the Firewalls page's
warnings (loaded by the templates of lower apps, which never import this one)."""

from __future__ import annotations

from typing import Any

from django import template

from apps.alerts.models import AlertSubscription
from apps.alerts.services import firing_warnings

register = template.Library()


@register.inclusion_tag("alerts/partials/incident_alerts.html", takes_context=True)
def incident_alerts(context: template.Context, incident: Any) -> dict[str, Any]:
    """The alert groups behind an incident, and whether the monitoring waits for a person."""
    groups = list(incident.alert_groups.order_by("scope", "klass"))
    return {
        "incident": incident,
        "groups": groups,
        "waiting": incident.ended_at is None
        and bool(groups)
        and all(g.state in ("settled", "quiet") for g in groups),
        "csrf_token": context.get("csrf_token"),
    }


@register.inclusion_tag("alerts/partials/firewall_warnings.html", takes_context=True)
def firewall_warnings(context: template.Context) -> dict[str, Any]:
    """Warnings firing now (never shown to the public), and the viewer's mail setting."""
    user = context["request"].user
    return {
        "warnings": list(firing_warnings()[:50]),
        "subscribed": AlertSubscription.objects.filter(user=user).exists(),
        "csrf_token": context.get("csrf_token"),
    }
