from __future__ import annotations

from typing import Any

from django import template

from apps.traffic.views import panel_context

register = template.Library()


@register.inclusion_tag("traffic/partials/panel.html", takes_context=True)
def traffic_panel(context: dict[str, Any], member: Any) -> dict[str, Any]:
    """The member's traffic panel (their own page and the staff member page)."""
    request = context["request"]
    return {**panel_context(request, member), "request": request}
