"""Backfill of the address-holder history from the audit trail (`manage.py abuse_backfill`).

The audit trail has every assignment, quarantine and device change since the portal started,
with the values before and after. Replaying it in order gives the holdings of the time before
the history was recorded live. A replayed row is written only where the history has no row of
that address overlapping it (so running it again, or after live recording began, adds
nothing twice), and a row still running at the end of the replay only when the current state
confirms it. Addresses held now without any row (data from before the audit trail) get a row
from their assignment time, marked as reconstructed from the current state.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange
from django.utils.dateparse import parse_datetime

from apps.abuse.choices import HolderKind, HoldingSource, HoldingState
from apps.abuse.models import AddressHolding
from apps.abuse.services import DEVICE_FAMILIES, member_label
from apps.audit.models import AuditEntry
from apps.members.models import Member
from apps.network.models import Device, PublicAddress

ACTIONS = (
    "public_ipv4.assign",
    "public_ipv4.quarantine",
    "device.add",
    "device.change",
    "device.readdress",
    "device.remove",
)


@dataclass
class BackfillOutcome:
    entries: int = 0
    written: int = 0
    already_known: int = 0
    unconfirmed: int = 0
    from_current_state: int = 0


@dataclass
class _Row:
    address: str
    kind: str
    start: dt.datetime
    end: dt.datetime | None = None
    state: str = HoldingState.HELD
    member_id: int | None = None
    device_ref: int | None = None
    device_name: str = ""
    mac: str | None = None
    cause: str = ""


class _Replay:
    """The audit entries applied in order to in-memory rows, as the live recording would."""

    def __init__(self) -> None:
        self.running: dict[str, _Row] = {}
        self.ended: list[_Row] = []
        self.devices: dict[int, dict[str, Any]] = {}

    def cut(self, address: str, at: dt.datetime) -> None:
        row = self.running.pop(address, None)
        if row is not None and row.start < at:
            row.end = at
            self.ended.append(row)

    def open(self, row: _Row) -> None:
        self.cut(row.address, row.start)
        if row.end is None:
            self.running[row.address] = row
        else:
            self.ended.append(row)

    def apply(self, entry: Any) -> None:
        changes, at = entry.changes or {}, entry.at
        if entry.action == "public_ipv4.assign":
            row = _Row(entry.object_repr, HolderKind.PUBLIC_IPV4, at, member_id=entry.member_id)
            row.cause = entry.action
            self.open(row)
        elif entry.action == "public_ipv4.quarantine":
            until = parse_datetime(str((changes.get("quarantined_until") or [None, ""])[1]))
            if until is None or until <= at:
                self.cut(entry.object_repr, at)
                return
            row = _Row(entry.object_repr, HolderKind.PUBLIC_IPV4, at, until)
            row.state, row.member_id, row.cause = (
                HoldingState.QUARANTINED,
                entry.member_id,
                entry.action,
            )
            self.open(row)
        else:
            self._device(entry, int(entry.object_id), changes, at)

    def _device(self, entry: Any, pk: int, changes: dict[str, Any], at: dt.datetime) -> None:
        before = dict(self.devices.get(pk, {}))
        after = dict(before)
        for name, (_old, new) in changes.items():
            after[name] = new
        if entry.action == "device.remove":
            after = {}
        for name, kind in DEVICE_FAMILIES:
            old, new = before.get(name), after.get(name)
            if old == new and before.get("mac") == after.get("mac"):
                continue
            if old:
                self.cut(old, at)
            if new:
                self.open(
                    _Row(
                        new,
                        kind,
                        at,
                        member_id=entry.member_id,
                        device_ref=pk,
                        device_name=after.get("name") or "",
                        mac=after.get("mac"),
                        cause=entry.action,
                    )
                )
        if after:
            self.devices[pk] = after
        else:
            self.devices.pop(pk, None)


def _held_now() -> set[tuple[str, str, int]]:
    """(kind, address, holder id) of every address held now: what confirms a running row."""

    held = {
        (HolderKind.PUBLIC_IPV4.value, address, member_id)
        for address, member_id in PublicAddress.objects.filter(member__isnull=False).values_list(
            "address", "member_id"
        )
    }
    for pk, ipv4, ipv6 in Device.objects.values_list("pk", "ipv4", "ipv6").iterator():
        held.add((HolderKind.PRIVATE_IPV4.value, ipv4, pk))
        if ipv6:
            held.add((HolderKind.IPV6.value, ipv6, pk))
    return held


def _confirmed(row: _Row, held: set[tuple[str, str, int]]) -> bool:
    """A row still running after the replay is written only if the address is held so now."""
    holder = row.member_id if row.kind == HolderKind.PUBLIC_IPV4 else row.device_ref
    return (str(row.kind), row.address, holder or 0) in held


class _Writer:
    """Inserts rows in batches, skipping any that would overlap a row the history has (or
    that this run wrote), so the exclusion constraint is never what refuses them."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names
        self.known: dict[str, list[tuple[dt.datetime, dt.datetime | None]]] = defaultdict(list)
        for address, period in AddressHolding.objects.values_list("address", "period").iterator():
            self.known[address].append((period.lower, period.upper))
        self.pending: list[AddressHolding] = []

    def overlaps(self, row: _Row) -> bool:
        return any(
            (end is None or row.start < end) and (row.end is None or start < row.end)
            for start, end in self.known[row.address]
        )

    def last_end(self, address: str) -> dt.datetime | None:
        ends = [end for _start, end in self.known[address] if end is not None]
        return max(ends) if ends else None

    def running(self, address: str) -> bool:
        return any(end is None for _start, end in self.known[address])

    def add(self, row: _Row, source: str) -> bool:
        if self.overlaps(row):
            return False
        self.known[row.address].append((row.start, row.end))
        self.pending.append(
            AddressHolding(
                address=row.address,
                kind=row.kind,
                state=row.state,
                period=DateTimeTZRange(row.start, row.end),
                member_id=row.member_id,
                member_name=self.names.get(row.member_id or 0, ""),
                device_ref=row.device_ref,
                device_name=row.device_name[:60],
                mac=row.mac,
                source=source,
                cause=row.cause[:60],
            )
        )
        if len(self.pending) >= 2000:
            self.flush()
        return True

    def flush(self) -> None:
        AddressHolding.objects.bulk_create(self.pending)
        self.pending = []


def _member_names(ids: set[int]) -> dict[int, str]:
    return {m.pk: member_label(m) for m in Member.objects.filter(pk__in=ids).select_related("user")}


def _current_rows() -> list[_Row]:
    """Addresses held now, as rows from their assignment (device: creation) time."""

    rows = [
        _Row(
            a.address, HolderKind.PUBLIC_IPV4, a.assigned_at, member_id=a.member_id, cause="current"
        )
        for a in PublicAddress.objects.filter(member__isnull=False, assigned_at__isnull=False)
    ]
    for device in Device.objects.all():
        for name, kind in DEVICE_FAMILIES:
            address = getattr(device, name)
            if address:
                rows.append(
                    _Row(
                        address,
                        kind,
                        device.created_at,
                        member_id=device.member_id,
                        device_ref=device.pk,
                        device_name=device.name,
                        mac=device.mac,
                        cause="current",
                    )
                )
    return rows


@transaction.atomic
def holdings_backfill() -> BackfillOutcome:
    """Replay the audit trail into the history, then cover what is held now; see the module."""

    outcome = BackfillOutcome()
    replay = _Replay()
    for entry in AuditEntry.objects.filter(action__in=ACTIONS).order_by("at", "id").iterator():
        outcome.entries += 1
        replay.apply(entry)
    candidates = [*replay.ended]
    held = _held_now()
    for row in replay.running.values():
        if _confirmed(row, held):
            candidates.append(row)
        else:
            outcome.unconfirmed += 1
    current = _current_rows()
    writer = _Writer(_member_names({r.member_id for r in [*candidates, *current] if r.member_id}))
    for row in sorted(candidates, key=lambda r: r.start):
        if writer.add(row, HoldingSource.AUDIT):
            outcome.written += 1
        else:
            outcome.already_known += 1
    for row in current:
        if writer.running(row.address):
            continue
        # Start after the last row the address has, so the reconstruction never overlaps it.
        last = writer.last_end(row.address)
        if last is not None and last > row.start:
            row.start = last
        if writer.add(row, HoldingSource.CURRENT):
            outcome.from_current_state += 1
    writer.flush()
    return outcome
