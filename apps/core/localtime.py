"""Moments as a person reads them: in the portal's time zone (settings.TIME_ZONE), named where a
reader could take the time for another zone (CET / CEST)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import formats, timezone


def zone_label() -> str:
    """The portal's zone for labels, as it is now: "CET (Europe/Berlin)"."""
    return f"{timezone.localtime().tzname()} ({timezone.get_current_timezone_name()})"


def when(value: Any, fmt: str = "SHORT_DATETIME_FORMAT") -> str:
    """`value` in the portal's zone with the zone named: "11/25/2026 9:12 p.m. CET"."""
    if not isinstance(value, dt.datetime):
        return "" if value in (None, "") else str(value)
    if timezone.is_naive(value):
        return formats.date_format(value, fmt)
    local = timezone.localtime(value)
    text = f"{formats.date_format(local, fmt)} {local.tzname()}"
    # The time and its zone stay on one line ("9:12 p.m. CET"); only after the date may it wrap.
    day, space, rest = text.partition(" ")
    return day + space + rest.replace(" ", NBSP)


NBSP = "\u00a0"
