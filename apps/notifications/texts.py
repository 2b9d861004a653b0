"""What a notice says, per kind, in the active language (`translation.override` picks it).

A notice stores only facts (`params`); the words are made here when the page or the mail is
rendered, so a member who switches language reads old notices in the new one as well.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.template.defaultfilters import filesizeformat
from django.utils import formats, timezone, translation
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from apps.core import localtime
from apps.notifications.choices import LiveOutcome, LiveWhat, NoticeKind

__all__ = ["notice_text"]


def _when(value: str | None) -> str:
    moment = parse_datetime(value or "")
    if moment is None:
        return ""
    return localtime.when(moment)


def _day(value: str | None) -> str:
    day = parse_date(value or "")
    return formats.date_format(day, "DATE_FORMAT") if day else ""


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 2:
        return ngettext("%(n)d second", "%(n)d seconds", int(seconds)) % {"n": int(seconds)}
    return ngettext("%(n)d minute", "%(n)d minutes", minutes) % {"n": minutes}


def _live(p: dict[str, Any]) -> tuple[str, str]:
    what = {
        LiveWhat.DEVICE: _("device"),
        LiveWhat.FORWARD: _("port forward"),
        LiveWhat.OPENING: _("IPv6 opening"),
    }.get(p.get("what", ""), _("change"))
    values = {"what": what, "label": p.get("label", ""), "when": _when(p.get("changed_at"))}
    if p.get("outcome") == LiveOutcome.FAILED:
        title = _("Your %(what)s “%(label)s” did not go live") % values
        body = _(
            "The change you made on %(when)s could not be put in force on the firewalls "
            "(%(reason)s). The volunteers see the failure too; if it persists for more than an "
            "hour, please open a ticket."
        ) % {**values, "reason": p.get("reason") or _("no reason given")}
        return title, body
    title = _("Your %(what)s “%(label)s” is live, later than usual") % values
    body = _(
        "The change you made on %(when)s took %(delay)s to reach the firewalls; it is in force now."
    ) % {**values, "delay": _duration(float(p.get("delay", 0)))}
    return title, body


def _test_access(p: dict[str, Any]) -> tuple[str, str]:
    date = _day(p.get("until"))
    title = _("Your test access ends on %(date)s") % {"date": date}
    body = _(
        "Your test access to the dormitory network ends on %(date)s. Come to the office hours "
        "before then to be checked in, so that your devices stay online; bring your ID."
    ) % {"date": date}
    return title, body


def _in_language(p: dict[str, Any], key: str) -> str:
    """`p[key]`, or its German text (`key_de`) for a German reader when one was written."""
    german = p.get(f"{key}_de") or ""
    if german and (translation.get_language() or "").startswith("de"):
        return german
    return p.get(key) or ""


def _incident(p: dict[str, Any]) -> tuple[str, str]:
    values = {
        "title": _in_language(p, "title"),
        "when": _when(p.get("started_at")),
        "buildings": ", ".join(p.get("buildings", [])),
    }
    title = _("Disruption in your building: %(title)s") % values
    body = (
        _(
            "Since %(when)s: %(title)s (buildings: %(buildings)s). The status page of the portal "
            "has the latest news; there is no need to open a ticket about it."
        )
        % values
    )
    if p.get("description"):
        body += "\n\n" + _in_language(p, "description")
    return title, body


def _traffic(p: dict[str, Any]) -> tuple[str, str]:
    month = parse_date(f"{p.get('month', '')}-01") or timezone.localdate()
    values = {
        "month": formats.date_format(month, "YEAR_MONTH_FORMAT"),
        "down": filesizeformat(p.get("bytes_in", 0)),
        "up": filesizeformat(p.get("bytes_out", 0)),
    }
    title = _("Your traffic in %(month)s") % values
    body = _("In %(month)s you downloaded %(down)s and uploaded %(up)s.") % values
    return title, body


_TEXTS: dict[str, Callable[[dict[str, Any]], tuple[str, str]]] = {
    NoticeKind.LIVE: _live,
    NoticeKind.TEST_ACCESS: _test_access,
    NoticeKind.INCIDENT: _incident,
    NoticeKind.TRAFFIC: _traffic,
}


def notice_text(notice: Any) -> tuple[str, str]:
    """(title, body) of a notice in the active language."""
    return _TEXTS[notice.kind](notice.params or {})
