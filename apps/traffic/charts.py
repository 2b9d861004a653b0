"""The member's traffic chart: bars per local day, in the unit the largest day reads best in."""

from __future__ import annotations

from typing import Any

from django.utils import formats
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from apps.tickets.charts import svg_chart

# Powers of 1024 with the names filesizeformat gives them, so the chart and the totals agree.
UNITS = ((1 << 40, "TB"), (1 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "KB"), (1, "B"))


def unit_for(largest: int) -> tuple[int, str]:
    for factor, name in UNITS:
        if largest >= factor:
            return factor, name
    return 1, "B"


def traffic_chart(series: list[Any]) -> tuple[SafeString, str]:
    """(svg, unit) of downloaded + uploaded per day."""
    totals = [d.bytes_in + d.bytes_out for d in series]
    factor, unit = unit_for(max(totals or [0]))
    # Translators: a day on the chart's axis (Django date format), e.g. "19 Nov" / "19. Nov."
    labels = [formats.date_format(d.day, _("j M")) for d in series]
    title = _("Traffic per day (%(unit)s, down and up)") % {"unit": unit}
    values: list[float | None] = [t / factor for t in totals]
    return svg_chart(title=title, labels=labels, values=values, unit=f" {unit}"), unit
