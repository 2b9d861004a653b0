"""The abuse history listens to the floors below it (apps/network/signals.py,
apps/dhcp/signals.py): each address given, changed or taken back starts or ends a holding, in
the sender's transaction. Connected in `AbuseConfig.ready()`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from apps.abuse.services import (
    device_addresses_record,
    public_ipv4_assign_record,
    public_ipv4_quarantine_record,
    registration_leases_record,
)
from apps.members.models import Member
from apps.network.models import Device


def public_ipv4_assigned(*, address: str, member: Member, at: dt.datetime, **_: Any) -> None:
    public_ipv4_assign_record(address=address, member=member, at=at)


def public_ipv4_quarantined(
    *, address: str, member: Member, at: dt.datetime, until: dt.datetime, **_: Any
) -> None:
    public_ipv4_quarantine_record(address=address, member=member, at=at, until=until)


def device_addresses_changed(
    *,
    device: Device,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    cause: str,
    at: dt.datetime | None,
    **_: Any,
) -> None:
    device_addresses_record(device=device, before=before, after=after, cause=cause, at=at)


def registration_leases_seen(
    *,
    leases: Iterable[tuple[str, str, dt.datetime, dt.datetime]],
    continues_within: dt.timedelta,
    **_: Any,
) -> None:
    registration_leases_record(leases=leases, continues_within=continues_within)
