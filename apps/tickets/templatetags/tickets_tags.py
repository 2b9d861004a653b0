"""The incident banner for the member UI, read from the status cache (no query per page)."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.inclusion_tag("tickets/partials/incident_banner.html")
def incident_banner() -> dict[str, Any]:
    """Current public incidents, read from the cache only (no query on any page)."""
    from apps.tickets.status import banner_incidents

    return {"incidents": banner_incidents()}


@register.filter
def duration(seconds: float | None) -> str:
    """1 h 05 min / 12 min / 40 s."""
    if seconds is None:
        return "—"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    return f"{hours // 24} d {hours % 24} h"


@register.filter
def can_support(user: Any) -> bool:
    """True for support staff and admins (who work the ticket inbox)."""
    from apps.accounts.roles import Role, has_role

    return has_role(user, Role.SUPPORT)
