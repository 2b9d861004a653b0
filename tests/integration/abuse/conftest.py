"""A clock the services read (timezone.now), so a test can walk a history through time."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

START = dt.datetime(2026, 3, 2, 9, 0, tzinfo=dt.UTC)
US = dt.timedelta(microseconds=1)


class Clock:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def advance(self, **delta: float) -> dt.datetime:
        self.now += dt.timedelta(**delta)
        return self.now


@pytest.fixture
def clock(monkeypatch):
    """timezone.now() answers `clock.now`; `clock.advance(days=1)` moves it on."""
    value = Clock(START)
    monkeypatch.setattr(timezone, "now", lambda: value.now)
    return value


@pytest.fixture
def lookup(clock):
    """abuse_lookup at the clock's time (ask about times up to it), with a reason."""
    from apps.abuse.services import abuse_lookup

    def ask(address: str, at: dt.datetime | str, reason: str = "ticket #1", actor=None):
        return abuse_lookup(actor=actor, address=address, at=at, reason=reason)

    return ask
