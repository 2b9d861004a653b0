"""Moments a person types, bounded to a sane range (2000 to a year from now).

Python and PostgreSQL both accept 0001-01-01 and 9999-12-31, but a time zone conversion or an
hour's arithmetic at either edge overflows, and PostgreSQL stores year 1 in the portal's zone as
a BC date that Python cannot read back: one typo made every page that lists the row answer 500.
Every date or time a person types goes through `moment_check` (forms and the API through
`MomentFormField` / `MomentSerializerField`), so nothing outside the range is stored or computed
with."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.translation import gettext as _
from rest_framework import serializers

__all__ = [
    "EARLIEST",
    "MomentFormField",
    "MomentSerializerField",
    "moment_check",
    "moment_latest",
    "moment_range_message",
]

EARLIEST = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
AHEAD = dt.timedelta(days=366)


def moment_latest(now: dt.datetime | None = None) -> dt.datetime:
    """The latest moment anyone may type: a year from now."""
    return (now or timezone.now()) + AHEAD


def moment_range_message() -> str:
    """Which times may be typed, as the refusal says it."""
    return _("Enter a time between %(first)s and %(last)s.") % {
        "first": EARLIEST.date().isoformat(),
        "last": moment_latest().date().isoformat(),
    }


def moment_check(value: dt.datetime | dt.date) -> dt.datetime | dt.date:
    """`value` itself when it lies in the sane range; ValueError with the message otherwise.
    A naive time is read in the portal's zone; a date is compared by its day."""
    if isinstance(value, dt.datetime):
        try:
            aware = timezone.make_aware(value) if timezone.is_naive(value) else value
            inside = EARLIEST <= aware <= moment_latest()
        except (OverflowError, ValueError):
            inside = False
    else:
        inside = EARLIEST.date() <= value <= moment_latest().date()
    if not inside:
        raise ValueError(moment_range_message())
    return value


class MomentFormField(forms.DateTimeField):
    """A form's date and time, refused with the range named when outside it."""

    def to_python(self, value: Any) -> dt.datetime | None:
        try:
            result = super().to_python(value)
        except OverflowError:
            raise ValidationError(moment_range_message(), code="range") from None
        if result is not None:
            try:
                moment_check(result)
            except ValueError as exc:
                raise ValidationError(str(exc), code="range") from None
        return result


class MomentSerializerField(serializers.DateTimeField):
    """The API's date and time, refused (400, field named) when outside the range."""

    def to_internal_value(self, value: Any) -> dt.datetime:
        try:
            result = super().to_internal_value(value)
            moment_check(result)
        except (OverflowError, ValueError):
            raise serializers.ValidationError(moment_range_message(), code="range") from None
        return result
