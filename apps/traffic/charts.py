"""The member's traffic chart: bars per local day, in the unit the largest day reads best in."""

from __future__ import annotations

from typing import Any

from django.utils import formats
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from apps.tickets.charts import svg_chart

UNITS = ((10**12, "TB"), (10**9, "GB"), (10**6, "MB"), (10**3, "kB"), (1, "B"))


def unit_for(largest: int) -> tuple[int, str]:
    for factor, name in UNITS:
        if largest >= factor:
            return factor, name
    return 1, "B"


def traffic_chart(series: list[Any]) -> tuple[SafeString, str]:
    """(svg, unit) of downloaded + uploaded per day."""
    totals = [d.bytes_in + d.bytes_out for d in series]
    factor, unit = unit_for(max(totals or [0]))
    labels = [formats.date_format(d.day, "SHORT_DATE_FORMAT") for d in series]
    title = _("Traffic per day (%(unit)s, down and up)") % {"unit": unit}
    values: list[float | None] = [t / factor for t in totals]
    return svg_chart(title=title, labels=labels, values=values, unit=f" {unit}"), unit
