"""Server-side SVG charts (no JavaScript library): bars for new tickets, lines for the rest."""

from __future__ import annotations

import math
from datetime import date
from typing import Any

from django.utils import formats
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

# PAD_R leaves room for half of the last day's label.
WIDTH, HEIGHT, PAD_L, PAD_R, PAD_B, PAD_T = 720, 230, 52, 36, 28, 30
X_LABELS = 5  # at most this many day labels under a chart: they stay apart on a phone


def axis_ticks(values: list[float]) -> list[float]:
    """0 and up to four evenly spaced round values (1, 2 or 5 times a power of ten) that cover
    the largest value; whole numbers for counts and minutes."""
    top = max([v for v in values if v is not None] or [0])
    if top <= 0:
        return [0, 1]
    step = 1.0
    for power in range(0, 12):
        for factor in (1, 2, 5):
            step = factor * 10**power
            if top / step <= 4:
                return [step * i for i in range(math.ceil(top / step) + 1)]
    return [0, top]


def number_text(value: float) -> str:
    """A value as the reader's locale writes it: "1,250" / "1.250"; whole numbers without a
    fraction."""
    if float(value).is_integer():
        return formats.number_format(int(value), use_l10n=True, force_grouping=True)
    return formats.number_format(round(value, 1), 1, use_l10n=True, force_grouping=True)


def day_label(day: date) -> str:
    """A day on an axis in the reader's locale: "25 Nov" / "25. Nov"."""
    # Translators: date formats (Django's date syntax) of a day inside a sentence.
    return formats.date_format(day, _("j M"))


def svg_chart(
    *,
    title: str,
    labels: list[str],
    values: list[float | None],
    kind: str = "bar",
    unit: str = "",
) -> SafeString:
    """One accessible SVG chart (role=img with a title; a data table sits beside it). `unit`
    names the y-axis ("tickets", "minutes") above it and follows each value in the tooltips."""
    n = max(len(values), 1)
    ticks = axis_ticks([v or 0 for v in values])
    top = ticks[-1]
    plot_w, plot_h = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_B - PAD_T
    step = plot_w / n

    def y(v: float) -> float:
        return PAD_T + plot_h - (v / top) * plot_h

    def tip(i: int, v: float) -> str:
        return f"<title>{escape(labels[i])}: {escape(number_text(v))} {escape(unit)}</title>"

    parts: list[str] = []
    if unit:
        parts.append(
            f'<text x="{PAD_L + 4}" y="{PAD_T - 10}" class="axis unit">{escape(unit)}</text>'
        )
    for tick in ticks:
        gy = y(tick)
        parts.append(
            f'<line x1="{PAD_L}" x2="{WIDTH - PAD_R}" y1="{gy:.1f}" y2="{gy:.1f}" class="grid"/>'
            f'<text x="{PAD_L - 6}" y="{gy + 5:.1f}" class="axis" text-anchor="end">'
            f"{escape(number_text(tick))}</text>"
        )
    if kind == "bar":
        for i, v in enumerate(values):
            top_y = y(v or 0)
            parts.append(
                f'<rect x="{PAD_L + i * step + 1:.1f}" y="{top_y:.1f}" '
                f'width="{max(step - 2, 1):.1f}" height="{PAD_T + plot_h - top_y:.1f}" class="bar">'
                f"{tip(i, v or 0)}</rect>"
            )
    else:
        points = " ".join(
            f"{PAD_L + i * step + step / 2:.1f},{y(v):.1f}"
            for i, v in enumerate(values)
            if v is not None
        )
        parts.append(f'<polyline points="{points}" class="line"/>')
        for i, v in enumerate(values):
            if v is not None:
                parts.append(
                    f'<circle cx="{PAD_L + i * step + step / 2:.1f}" cy="{y(v):.1f}" r="3" '
                    f'class="dot">{tip(i, v)}</circle>'
                )
    if all(v is None for v in values):
        no_data = escape(_("No data in this period"))
        parts.append(
            f'<text x="{WIDTH / 2:.0f}" y="{HEIGHT / 2:.0f}" class="axis" text-anchor="middle">'
            f"{no_data}</text>"
        )
    every = max(math.ceil(n / X_LABELS), 1)
    # Counted back from the newest day, so that today always has its label.
    for i in sorted(range(len(labels) - 1, -1, -every)):
        parts.append(
            f'<text x="{PAD_L + i * step + step / 2:.1f}" y="{HEIGHT - 6}" class="axis" '
            f'text-anchor="middle">{escape(labels[i])}</text>'
        )
    # Numbers are formatted here and every text is escaped above.
    body = mark_safe("".join(parts))  # noqa: S308
    return format_html(
        '<svg viewBox="0 0 {} {}" role="img" aria-label="{}" class="chart chart-{}">'
        "<title>{}</title>{}</svg>",
        WIDTH,
        HEIGHT,
        title,
        kind,
        title,
        body,
    )


def stats_charts(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """The three charts of the statistics page."""
    days = stats["days"]
    labels = [day_label(d["day"]) for d in days]
    charts = [
        (_("New tickets per day"), "new", "bar", _("tickets")),
        (_("Open tickets at the end of each day"), "open", "line", _("tickets")),
        (_("Median time to the first response"), "frt_minutes", "line", _("minutes")),
    ]
    return [
        {
            "title": title,
            "svg": svg_chart(
                title=title, labels=labels, values=[d[key] for d in days], kind=kind, unit=unit
            ),
        }
        for title, key, kind, unit in charts
    ]
