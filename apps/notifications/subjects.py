"""What notices are made about, told by the apps above notifications, which it does not import.

An incident lives in the tickets app (a floor above); the notices of its residents are made here.
The tickets app registers how an incident is read for its notices from its AppConfig.ready()
(`incident_reader_register`), the same way up as apps/members/extensions.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class IncidentFacts:
    """A public, open incident as its notices tell it."""

    row: Any  # the incident itself: the audit entry of the notices is about it
    pk: int
    title: str
    description: str
    building_ids: tuple[int, ...]
    building_codes: tuple[str, ...]
    started_at: datetime
    title_de: str = ""  # the German texts, when written ("": German readers get the English)
    description_de: str = ""


# incident id -> its facts, or None when it is gone, not public, ended or in no building
IncidentReader = Callable[[int], IncidentFacts | None]
_incident_reader: list[IncidentReader] = []


def incident_reader_register(reader: IncidentReader) -> None:
    """How an incident is read for its notices (tickets; once)."""
    _incident_reader[:] = [reader]


def incident_facts(incident_id: int) -> IncidentFacts | None:
    """The registered reader's answer (None without one)."""
    return _incident_reader[0](incident_id) if _incident_reader else None
