"""The incident banner for the member UI, read from the status cache (no query per page)."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from apps.accounts.roles import Role, has_role, user_roles
from apps.tickets.history import event_sentence
from apps.tickets.status import banner_incidents

register = template.Library()


@register.inclusion_tag("tickets/partials/incident_banner.html")
def incident_banner() -> dict[str, Any]:
    """Current public incidents, read from the cache only (no query on any page)."""
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
    return has_role(user, Role.SUPPORT)


@register.filter
def event_text(event: Any) -> SafeString:
    """{{ event|event_text }}: a history event as words ("Anna Meier set the status to Solved")."""
    return event_sentence(event)


@register.filter
def breakable(address: str) -> SafeString:
    """An e-mail address that wraps after the @ and before a dot, not in the middle of a word."""
    text = str(escape(address or ""))
    return mark_safe(text.replace("@", "@<wbr>").replace(".", "<wbr>."))  # noqa: S308 - escaped


@register.filter
def role_names(user: Any) -> str:
    """The user's roles by their names in the reader's language ("Mitglied, Support")."""
    held = user_roles(user)
    return ", ".join(str(role.label) for role in Role if role in held)
