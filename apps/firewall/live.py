"""Live state of rows (devices, forwards, openings): which hosts enforce their last change."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from apps.firewall.choices import PushStatus
from apps.firewall.models import FirewallHost, PushLogEntry, Site
from apps.firewall.snapshot import carried_rows
from apps.members.choices import NETWORKED_STATUSES
from apps.members.models import Member
from apps.network.choices import LiveStatus
from apps.network.models import Device

# The reason of a pending host that staff hold on an older version (FirewallHost.pinned_version).
PINNED = "pinned"


@dataclass(frozen=True)
class HostLiveState:
    """One host's view of one row: live since, pending, or failed with a reason."""

    host: str
    state: str  # LiveStatus (not OFF: a host never carries a row that is off)
    since: datetime | None = None
    reason: str = ""


@dataclass(frozen=True)
class LiveState:
    """A row's state across every enabled host."""

    hosts: tuple[HostLiveState, ...]

    @property
    def state(self) -> str:
        states = {h.state for h in self.hosts}
        if not self.hosts:
            return LiveStatus.PENDING
        if states == {LiveStatus.LIVE}:
            return LiveStatus.LIVE
        return LiveStatus.FAILED if LiveStatus.FAILED in states else LiveStatus.PENDING

    @property
    def since(self) -> datetime | None:
        """When the last host started enforcing it (live on all since)."""
        times = [h.since for h in self.hosts if h.since]
        return max(times) if times and self.state == LiveStatus.LIVE else None


@dataclass(frozen=True)
class LiveHosts:
    """The enabled hosts as live states need them, and the buildings each one is limited to
    (hosts serving every building are absent from `served`). Read once per page."""

    hosts: list[dict[str, Any]]
    served: dict[int, set[int]]


def live_hosts() -> LiveHosts:
    """The enabled hosts and their sites (2 queries)."""
    by_site: dict[int, set[int]] = defaultdict(set)
    for site_id, building_id in Site.buildings.through.objects.values_list(
        "site_id", "building_id"
    ):
        by_site[site_id].add(building_id)
    hosts = list(
        FirewallHost.objects.filter(enabled=True).values(
            "pk",
            "site_id",
            "confirmed_digest",
            "drift",
            "name",
            "push_status",
            "error_reason",
            "last_push_at",
            "applied_version__snapshot_at",
            "pinned_version_id",
        )
    )
    served = {h["pk"]: by_site[h["site_id"]] for h in hosts if by_site.get(h["site_id"])}
    return LiveHosts(hosts, served)


def live_states(
    *,
    changed_at: dict[Any, datetime],
    building_of: dict[Any, int | None] | None = None,
    hosts: LiveHosts | None = None,
) -> dict[Any, LiveState]:
    """For rows last changed at `changed_at[key]`: live on which host since when (3 queries,
    1 with `hosts` already read).

    A host enforces a change when the version it confirmed was compiled from a snapshot taken
    after the change and what it read back still matches what it read back at that confirm
    (no drift); "since" is that host's first such confirmation, or the change itself when the
    bundle the host already ran carries it (a change that compiles to the same content moves
    only that version's snapshot time on: nothing is pushed, and a later push of other changes
    is not when this row went live). Hosts of a site limited to some
    buildings count only for rows whose member lives there (`building_of[key]`). See
    docs/live-state.md."""
    if not changed_at:
        return {}
    hosts = hosts or live_hosts()
    served = hosts.served
    earliest = min(changed_at.values())
    confirms: dict[int, list[tuple[datetime, datetime]]] = defaultdict(list)
    for host_id, at, snapshot_at in (
        PushLogEntry.objects.filter(step="confirm", ok=True, version__snapshot_at__gte=earliest)
        .order_by("at")
        .values_list("host_id", "at", "version__snapshot_at")
    ):
        if snapshot_at is not None:
            confirms[host_id].append((at, snapshot_at))
    result = {}
    for key, changed in changed_at.items():
        per_host = []
        building = building_of.get(key) if building_of is not None else None
        for h in hosts.hosts:
            site = served.get(h["pk"])
            if site and building_of is not None and building not in site:
                continue  # another site's firewall: it never carries this row
            running = h["applied_version__snapshot_at"]
            matched = bool((h["confirmed_digest"] or {}).get("total")) and not h["drift"]
            if running is not None and running >= changed and not matched:
                reason = "drift" if h["drift"] else "no read-back"
                per_host.append(HostLiveState(h["name"], LiveStatus.PENDING, reason=reason))
            elif running is not None and running >= changed:
                first = next((at for at, snap in confirms[h["pk"]] if snap >= changed), None)
                since = max(first, changed) if first is not None else None
                per_host.append(HostLiveState(h["name"], LiveStatus.LIVE, since))
            elif h["push_status"] in (PushStatus.ERROR, PushStatus.UNREACHABLE) and (
                h["last_push_at"] and h["last_push_at"] >= changed
            ):
                per_host.append(
                    HostLiveState(h["name"], LiveStatus.FAILED, reason=h["error_reason"])
                )
            elif h.get("pinned_version_id"):
                # Staff hold this host on an older version: no push reaches it until they let
                # it go, so "waiting for the firewalls" would wait forever.
                per_host.append(HostLiveState(h["name"], LiveStatus.PENDING, reason=PINNED))
            else:
                per_host.append(HostLiveState(h["name"], LiveStatus.PENDING))
        result[key] = LiveState(tuple(per_host))
    return result


def _not_carried(rows: list[Any]) -> dict[Any, str]:
    """The rows no snapshot carries (a suspended member's forwards, a disabled opening), each
    with why; one query."""
    from django.db.models import BooleanField, Case, Value, When
    from django.utils.translation import gettext as _

    model = type(rows[0])
    carried, status_path = carried_rows(model)
    found = model.objects.filter(pk__in=[row.pk for row in rows]).annotate(
        carried=Case(
            When(carried, then=Value(True)), default=Value(False), output_field=BooleanField()
        )
    )
    off = {}
    for pk, is_carried, status in found.values_list("pk", "carried", status_path):
        if not is_carried:
            off[pk] = (
                _("not in force: the membership is not active")
                if status not in NETWORKED_STATUSES
                else _("not in force: disabled")
            )
    return off


def live_attach(rows: Iterable[Any], *, hosts: LiveHosts | None = None) -> bool:
    """Set `row.live` (what network/partials/live_state.html and the API show) on rows of one
    kind (devices, forwards or openings) with an `updated_at`; True while any of them is not yet
    live everywhere (the page keeps polling). Pass `hosts` when a page attaches several kinds."""
    rows = list(rows)
    if not rows:
        return False
    building_of = None
    hosts = hosts or live_hosts()
    if hosts.served:  # some hosts serve only some buildings: which building is each row's?
        if hasattr(rows[0], "member_id"):  # devices and forwards name their member
            member_of = {row.pk: row.member_id for row in rows}
            buildings = dict(
                Member.objects.filter(pk__in=set(member_of.values())).values_list(
                    "pk", "room__building_id"
                )
            )
        else:  # openings: through their device (never one query per row)
            member_of = {row.pk: row.device_id for row in rows}
            buildings = dict(
                Device.objects.filter(pk__in=set(member_of.values())).values_list(
                    "pk", "member__room__building_id"
                )
            )
        building_of = {pk: buildings.get(key) for pk, key in member_of.items()}
    off = _not_carried(rows)
    states = live_states(
        changed_at={row.pk: row.updated_at for row in rows if row.pk not in off},
        building_of=building_of,
        hosts=hosts,
    )
    waiting = False
    for row in rows:
        if row.pk in off:
            row.live = {"state": LiveStatus.OFF, "hosts": [], "since": None, "reason": off[row.pk]}
            row.live["per_host"] = []
            continue
        state = states[row.pk]
        failed = [h for h in state.hosts if h.state == LiveStatus.FAILED]
        row.live = {
            "state": state.state,
            "hosts": [h.host for h in state.hosts if h.state == LiveStatus.LIVE],
            "held": [h.host for h in state.hosts if h.reason == PINNED],
            "since": state.since,
            "reason": "; ".join(f"{h.host}: {h.reason}" for h in failed),
            "per_host": [
                {"host": h.host, "state": h.state, "since": h.since, "reason": h.reason}
                for h in state.hosts
            ],
        }
        waiting |= state.state != LiveStatus.LIVE
    return waiting
