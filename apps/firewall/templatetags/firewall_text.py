"""{{ host.error_reason|push_reason }}: a push's failure reason in the reader's language."""

from __future__ import annotations

from django import template

from apps.firewall.reasons import translated

register = template.Library()


@register.filter
def push_reason(reason: str) -> str:
    return translated(reason or "")
