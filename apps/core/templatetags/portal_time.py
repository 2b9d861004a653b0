"""Template filters for times a person reads (see apps.core.localtime): templates already convert
aware datetimes to the portal's zone; these name it, and read the UTC text that audit entries
store for datetimes as local time."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import template
from django.utils import timezone

from apps.core import localtime

register = template.Library()


@register.filter
def when(value: Any, fmt: str = "SHORT_DATETIME_FORMAT") -> str:
    """`{{ incident.started_at|when }}` → "11/25/2026 9:12 p.m. CET"; a format name or string
    as for `date` may follow."""
    return localtime.when(value, fmt)


@register.filter
def audit_value(value: Any) -> Any:
    """One old or new value of an audit entry; a stored datetime (ISO text in UTC) as local time."""
    if isinstance(value, str) and len(value) >= 16 and value[4:5] == "-" and value[10:11] in "T ":
        try:
            moment = dt.datetime.fromisoformat(value)
        except ValueError:
            return value
        if timezone.is_aware(moment):
            return localtime.when(moment)
    return value


@register.simple_tag
def time_zone_name() -> str:
    """The portal's zone for labels: "CET (Europe/Berlin)"."""
    return localtime.zone_label()
