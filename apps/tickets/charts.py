"""Server-side SVG charts (no JavaScript library): bars for new tickets, lines for the rest."""

from __future__ import annotations

from typing import Any

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

WIDTH, HEIGHT, PAD_L, PAD_B, PAD_T = 720, 200, 40, 24, 12


def _scale(values: list[float]) -> float:
    top = max([v for v in values if v is not None] or [0])
    return top if top > 0 else 1


def svg_chart(
    *, title: str, labels: list[str], values: list[float | None], kind: str = "bar", unit: str = ""
) -> SafeString:
    """One accessible SVG chart (role=img with a title; a data table sits beside it)."""
    n = max(len(values), 1)
    top = _scale([v or 0 for v in values])
    plot_w, plot_h = WIDTH - PAD_L - 8, HEIGHT - PAD_B - PAD_T
    step = plot_w / n

    def y(v: float) -> float:
        return PAD_T + plot_h - (v / top) * plot_h

    parts: list[str] = []
    for frac in (0, 0.5, 1):
        gy = y(top * frac)
        parts.append(
            f'<line x1="{PAD_L}" x2="{WIDTH - 8}" y1="{gy:.1f}" y2="{gy:.1f}" class="grid"/>'
            f'<text x="{PAD_L - 4}" y="{gy + 4:.1f}" class="axis" text-anchor="end">'
            f"{top * frac:.3g}</text>"
        )
    if kind == "bar":
        for i, v in enumerate(values):
            top_y = y(v or 0)
            parts.append(
                f'<rect x="{PAD_L + i * step + 1:.1f}" y="{top_y:.1f}" '
                f'width="{max(step - 2, 1):.1f}" height="{PAD_T + plot_h - top_y:.1f}" class="bar">'
                f"<title>{escape(labels[i])}: {v or 0:g}</title></rect>"
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
                    f'<circle cx="{PAD_L + i * step + step / 2:.1f}" cy="{y(v):.1f}" r="2.5" '
                    f'class="dot"><title>{escape(labels[i])}: {v:.3g}{escape(unit)}</title></circle>'
                )
    if all(v is None for v in values):
        no_data = escape(_("No data in this period"))
        parts.append(
            f'<text x="{WIDTH / 2:.0f}" y="{HEIGHT / 2:.0f}" class="axis" text-anchor="middle">'
            f"{no_data}</text>"
        )
    for i in range(0, n, max(n // 6, 1)):
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
    labels = [d["day"].strftime("%d.%m") for d in days]
    return [
        {
            "title": _("New tickets per day"),
            "svg": svg_chart(
                title=_("New tickets per day"), labels=labels, values=[d["new"] for d in days]
            ),
        },
        {
            "title": _("Open tickets at the end of each day"),
            "svg": svg_chart(
                title=_("Open tickets at the end of each day"),
                labels=labels,
                values=[d["open"] for d in days],
                kind="line",
            ),
        },
        {
            "title": _("Median first-response time (hours)"),
            "svg": svg_chart(
                title=_("Median first-response time (hours)"),
                labels=labels,
                values=[d["frt_hours"] for d in days],
                kind="line",
                unit=" h",
            ),
        },
    ]
