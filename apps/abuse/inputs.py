"""The three inputs of a lookup (address, point in time, reason), checked the same way for the
page, the API and the command. Each check names what is wrong, so a typo never becomes a 500
or, worse, a wrong "nobody"."""

from __future__ import annotations

import datetime as dt
import ipaddress
import zoneinfo

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.core.moments import moment_check, moment_range_message

REASON_MAX = 500


class LookupInvalid(Exception):
    """The lookup was refused before anything was read or written; `errors` maps each field to
    its messages."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(m for msgs in errors.values() for m in msgs))
        self.errors = errors


def portal_zone() -> zoneinfo.ZoneInfo:
    """The portal's time zone (settings.TIME_ZONE): times without an offset are read in it."""
    return zoneinfo.ZoneInfo(settings.TIME_ZONE)


def address_parse(text: str) -> str:
    """One IPv4 or IPv6 address, normalised (ValueError with the message otherwise)."""
    text = (text or "").strip()
    if not text:
        raise ValueError(_("Enter the address the complaint is about."))
    if "/" in text:
        raise ValueError(
            _("Enter a single address, not a network (%(text)s).") % {"text": text[:60]}
        )
    try:
        ip = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        raise ValueError(
            _("“%(text)s” is not an IPv4 or IPv6 address.") % {"text": text[:60]}
        ) from None
    # ::ffff:198.51.100.7 (how some logs write IPv4) is the IPv4 address itself.
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


def _offset_text(value: dt.datetime) -> str:
    offset = value.utcoffset() or dt.timedelta(0)
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _localise(naive: dt.datetime) -> dt.datetime:
    """A wall-clock time of the portal's zone as an aware time; refuses the hour that does not
    exist (clocks jump forward) and the hour that happens twice (clocks go back)."""
    zone = portal_zone()
    first, second = naive.replace(tzinfo=zone, fold=0), naive.replace(tzinfo=zone, fold=1)
    if first.utcoffset() == second.utcoffset():
        return first
    if first.astimezone(dt.UTC).astimezone(zone).replace(tzinfo=None) != naive:
        raise ValueError(
            _(
                "%(time)s does not exist in %(zone)s: the clocks jumped forward at that hour. "
                "Check the time, or give it with its UTC offset."
            )
            % {"time": naive.isoformat(sep=" "), "zone": zone.key}
        )
    raise ValueError(
        _(
            "%(time)s happened twice in %(zone)s (the clocks went back). Add the offset: "
            "%(first)s or %(second)s."
        )
        % {
            "time": naive.isoformat(sep=" "),
            "zone": zone.key,
            "first": _offset_text(first),
            "second": _offset_text(second),
        }
    )


def time_parse(value: str | dt.datetime, *, now: dt.datetime | None = None) -> dt.datetime:
    """A point in time: ISO 8601 (`2026-11-17 03:12`, `...T03:12:05`, `...Z`, `...+01:00`);
    without an offset it is read in the portal's time zone. Not in the future."""
    if isinstance(value, dt.datetime):
        parsed = value
    else:
        text = (value or "").strip()
        if not text:
            raise ValueError(_("Enter the point in time the complaint names."))
        if text.upper().endswith(" UTC"):
            text = text[:-4] + "+00:00"
        try:
            parsed = dt.datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(
                _(
                    "“%(text)s” is not a point in time. Write it as 2026-11-17 03:12 (in "
                    "%(zone)s) or with an offset, e.g. 2026-11-17T02:12:00Z."
                )
                % {"text": text[:60], "zone": portal_zone().key}
            ) from None
    try:
        if timezone.is_naive(parsed):
            parsed = _localise(parsed)
        moment_check(parsed.astimezone(dt.UTC))
    except OverflowError:
        raise ValueError(moment_range_message()) from None
    if parsed > (now or timezone.now()):
        raise ValueError(_("That time lies in the future; nobody can have held it yet."))
    return parsed


def reason_clean(text: str) -> str:
    """The reason is required: every lookup is audited with it."""
    text = " ".join((text or "").split())
    if not text:
        raise ValueError(
            _("Say why you look this up (e.g. the complaint's ticket or reference number).")
        )
    if len(text) > REASON_MAX:
        raise ValueError(
            _("The reason may be at most %(max)d characters long (it has %(n)d).")
            % {"max": REASON_MAX, "n": len(text)}
        )
    return text


def lookup_inputs_clean(
    *, address: str, at: str | dt.datetime, reason: str
) -> tuple[str, dt.datetime, str]:
    """All three inputs checked at once; LookupInvalid names every field that is wrong."""
    errors: dict[str, list[str]] = {}
    values: dict[str, object] = {}
    for field, check, raw in (
        ("address", address_parse, address),
        ("at", time_parse, at),
        ("reason", reason_clean, reason),
    ):
        try:
            values[field] = check(raw)  # type: ignore[operator]
        except ValueError as exc:
            errors[field] = [str(exc)]
    if errors:
        raise LookupInvalid(errors)
    return values["address"], values["at"], values["reason"]  # type: ignore[return-value]
