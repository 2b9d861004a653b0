"""CSV downloads of the staff tables, streamed row by row.

A spreadsheet runs a cell that starts with `=`, `+`, `-` or `@` (or a tab or carriage return
before one) as a formula: a member's name or a mail subject such as `=HYPERLINK(...)` would run on
the volunteer's computer. Every such cell gets a leading apostrophe, which spreadsheets show as
text (OWASP's advice on CSV injection). The file starts with a byte-order mark, so spreadsheets
read umlauts as UTF-8; times are the portal's local time.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence
from datetime import date, datetime, tzinfo
from typing import Any

from django.http import StreamingHttpResponse
from django.utils import timezone, translation
from django.utils.http import content_disposition_header

__all__ = ["FORMULA_START", "csv_cell", "csv_response"]

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any, zone: tzinfo | None = None) -> str:
    """One cell as text: empty for None, local time (`zone`, else the portal's) for datetimes,
    formulas neutralised."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(zone or timezone.get_current_timezone())
        text = value.strftime("%Y-%m-%d %H:%M")
    elif isinstance(value, date):
        text = value.isoformat()
    elif isinstance(value, list | tuple):
        text = ", ".join(str(v) for v in value)
    else:
        text = str(value)
    if text.startswith(FORMULA_START):
        return "'" + text
    return text


class _Line:
    """csv.writer's file: hands back each line instead of keeping it."""

    def write(self, value: str) -> str:
        return value


def csv_response(
    *, filename: str, header: Sequence[Any], rows: Iterable[Sequence[Any]]
) -> StreamingHttpResponse:
    """A streamed CSV download: `header`, then `rows` (read lazily, in the reader's language)."""
    language = translation.get_language()
    zone = timezone.get_current_timezone()
    writer = csv.writer(_Line())
    first = writer.writerow([csv_cell(h) for h in header])

    def lines() -> Iterator[str]:
        yield "\ufeff" + first
        with translation.override(language):
            for row in rows:
                yield writer.writerow([csv_cell(v, zone) for v in row])

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = content_disposition_header(True, filename)
    response["Cache-Control"] = "no-store"
    return response
