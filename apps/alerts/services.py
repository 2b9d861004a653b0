"""Alerts in, incidents out: Alertmanager's alerts mapped to places, grouped by place and class,
outages opening (or joining) one public incident per episode, warnings going to the staff.

Every automatic step is audited as done by the system (actor None) with the alert's labels.
Concurrent webhook calls are serialised per place by an advisory lock and per group by a row
lock; the unique constraints on groups and alerts are the last word.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.alerts import dispatch
from apps.alerts.choices import OUTAGE_CLASSES, RULE_CLASSES, AlertClass, GroupState
from apps.alerts.models import Alert, AlertGroup, AlertSubscription
from apps.alerts.payload import ReceivedAlert
from apps.alerts.texts import incident_texts
from apps.audit.services import audit_record
from apps.firewall.models import FirewallHost, Site
from apps.tickets.choices import IncidentPhase, IncidentSeverity
from apps.tickets.models import Incident
from apps.tickets.services import (
    incident_buildings_add,
    incident_declare,
    incident_end,
    incident_update_post,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

log = structlog.get_logger(__name__)


@dataclass
class Place:
    """Where an alert's trouble is: a site and its buildings, or the whole network."""

    scope: str  # the site's name, "" for the whole network
    site: Site | None = None
    buildings: list[Any] = field(default_factory=list)


@dataclass
class ReceiveResult:
    alerts: int = 0
    opened: list[int] = field(default_factory=list)  # incidents opened
    joined: list[int] = field(default_factory=list)  # incidents an alert group joined


def alert_class(alertname: str) -> str:
    return RULE_CLASSES.get(alertname, AlertClass.OTHER)


def _places(alerts: list[ReceivedAlert]) -> dict[tuple[str, str], Place]:
    """The place of each (site label, host label) pair, in two queries."""
    pairs = {(a.labels.get("site", ""), a.labels.get("host", "")) for a in alerts}
    sites = {
        s.name: s
        for s in Site.objects.filter(name__in={s for s, _h in pairs if s}).prefetch_related(
            "buildings"
        )
    }
    host_sites = dict(
        FirewallHost.objects.filter(name__in={h for s, h in pairs if h and not s}).values_list(
            "name", "site__name"
        )
    )
    missing = {name for name in host_sites.values() if name and name not in sites}
    for site in Site.objects.filter(name__in=missing).prefetch_related("buildings"):
        sites[site.name] = site
    places = {}
    for site_label, host_label in pairs:
        site = sites.get(site_label or host_sites.get(host_label) or "")
        if site is None:
            if site_label or host_label:
                log.warning("alerts.unknown_place", site=site_label, host=host_label)
            places[(site_label, host_label)] = Place(scope="")
            continue
        buildings = sorted(site.buildings.all(), key=lambda b: b.pk)
        # A site that serves no building in particular serves them all: the whole network.
        places[(site_label, host_label)] = Place(scope=site.name, site=site, buildings=buildings)
    return places


def _lock_place(scope: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"alerts:{scope}"])


def alerts_receive(*, alerts: list[ReceivedAlert], now: dt.datetime | None = None) -> ReceiveResult:
    """Store a webhook call's alerts (resends change nothing) and act on the groups whose state
    changed: fire, flap, resolve."""
    now = now or timezone.now()
    places = _places(alerts)
    grouped: dict[tuple[str, str], list[ReceivedAlert]] = defaultdict(list)
    place_of: dict[str, Place] = {}
    for alert in alerts:
        place = places[(alert.labels.get("site", ""), alert.labels.get("host", ""))]
        place_of[place.scope] = place
        grouped[(place.scope, alert_class(alert.alertname))].append(alert)
    result = ReceiveResult(alerts=len(alerts))
    with transaction.atomic():
        for scope in sorted(place_of):  # one order everywhere: no deadlock between callers
            _lock_place(scope)
        for scope, klass in sorted(grouped):
            _group_receive(place_of[scope], klass, grouped[(scope, klass)], now, result)
    return result


def _alerts_store(group: AlertGroup, alerts: list[ReceivedAlert]) -> None:
    """Insert or update each alert by (fingerprint, start); a resolved alert never fires again
    (Alertmanager may deliver an old "firing" after the "resolved")."""
    latest: dict[tuple[str, dt.datetime], ReceivedAlert] = {}
    for alert in alerts:
        key = (alert.fingerprint, alert.starts_at)
        if key not in latest or latest[key].status == "firing":
            latest[key] = alert
    resolved = set(
        Alert.objects.filter(fingerprint__in={k[0] for k in latest}, status="resolved").values_list(
            "fingerprint", "starts_at"
        )
    )
    rows = [
        Alert(
            group=group,
            fingerprint=a.fingerprint,
            alertname=a.alertname,
            status="resolved" if (a.fingerprint, a.starts_at) in resolved else a.status,
            starts_at=a.starts_at,
            ends_at=a.ends_at,
            labels=a.labels,
        )
        for a in latest.values()
    ]
    Alert.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["fingerprint", "starts_at"],
        update_fields=["status", "ends_at", "labels", "updated_at"],
    )
    for a in latest.values():
        if a.status == "resolved":  # an older start of the same alert is over as well
            Alert.objects.filter(
                fingerprint=a.fingerprint, status="firing", starts_at__lte=a.starts_at
            ).update(status="resolved", updated_at=timezone.now())


def _group_receive(
    place: Place, klass: str, alerts: list[ReceivedAlert], now: dt.datetime, result: ReceiveResult
) -> None:
    group, _created = AlertGroup.objects.get_or_create(
        scope=place.scope, klass=klass, defaults={"site": place.site}
    )
    group = AlertGroup.objects.select_for_update().get(pk=group.pk)
    _alerts_store(group, alerts)
    firing = list(group.alerts.filter(status="firing").order_by("starts_at"))
    newest = max(alerts, key=lambda a: a.starts_at)
    group.labels, group.summary = newest.labels, newest.summary
    if firing and group.state != GroupState.FIRING:
        _group_fire(group, place, started_at=firing[0].starts_at, now=now, result=result)
    elif not firing and group.state == GroupState.FIRING:
        _group_resolve(group, now=now)
    group.save()


def _audit(action: str, obj: Any, group: AlertGroup, **extra: Any) -> None:
    changes = {"labels": [None, group.labels], "class": [None, group.klass]}
    changes.update({key: [None, value] for key, value in extra.items()})
    audit_record(actor=None, action=action, obj=obj, changes=changes)


def _group_fire(
    group: AlertGroup, place: Place, *, started_at: dt.datetime, now: dt.datetime,
    result: ReceiveResult,
) -> None:  # fmt: skip
    previous = group.state
    group.state = GroupState.FIRING
    group.resolved_at = None
    incident = group.incident
    is_open = incident is not None and incident.ended_at is None
    if previous != GroupState.RESOLVED or not is_open:  # a flap keeps its episode's start
        group.fired_at = started_at
    _audit("alert.fire", group, group, startsAt=started_at.isoformat(), flap=previous)
    if group.klass not in OUTAGE_CLASSES:
        if previous != GroupState.RESOLVED:
            group_id = group.pk
            transaction.on_commit(lambda: dispatch.alert_warning_mail(group_id))
        return
    if group.not_outage:
        return
    if is_open:
        if previous == GroupState.SETTLED:  # it had said "working again": say it is back
            texts = incident_texts(group.klass, _names(place))
            incident_update_post(
                incident=incident, actor=None, body=texts["again"][0], body_de=texts["again"][1],
                phase=IncidentPhase.INVESTIGATING,
            )  # fmt: skip
            _audit("alert.incident_again", incident, group)
        return
    group.incident = _incident_for(group, place, result)


def _names(place: Place) -> list[str]:
    return [b.name or b.code for b in place.buildings]


def _open_incident(place: Place) -> Incident | None:
    """The open incident for these buildings (or, for the whole network, one an alert opened
    for the whole network), oldest first."""
    current = Incident.objects.filter(ended_at__isnull=True, public=True).order_by("started_at")
    if place.buildings:
        current = current.filter(buildings__in=place.buildings)
    else:
        current = current.filter(Q(alert_groups__scope="") & Q(buildings__isnull=True))
    return current.select_for_update(of=("self",)).first()


def _incident_for(group: AlertGroup, place: Place, result: ReceiveResult) -> Incident:
    texts = incident_texts(group.klass, _names(place))
    incident = _open_incident(place)
    if incident is not None:
        incident_buildings_add(incident=incident, buildings=place.buildings, actor=None)
        incident_update_post(
            incident=incident, actor=None, body=texts["also"][0], body_de=texts["also"][1],
            phase=IncidentPhase.INVESTIGATING,
        )  # fmt: skip
        _audit("alert.incident_join", incident, group)
        result.joined.append(incident.pk)
        return incident
    critical = group.klass in (AlertClass.NO_PRIMARY, AlertClass.UNREACHABLE)
    incident = incident_declare(
        actor=None,
        title=texts["title"][0],
        title_de=texts["title"][1],
        description=texts["opened"][0],
        description_de=texts["opened"][1],
        severity=IncidentSeverity.CRITICAL if critical else IncidentSeverity.MAJOR,
        affected=[] if place.buildings else ["network"],
        started_at=group.fired_at,
        buildings=place.buildings,
    )
    _audit("alert.incident_open", incident, group, startsAt=group.fired_at.isoformat())
    result.opened.append(incident.pk)
    return incident


def _group_resolve(group: AlertGroup, *, now: dt.datetime) -> None:
    group.state = GroupState.RESOLVED
    group.resolved_at = now
    group.not_outage = False  # "not an outage" lasts until the alerts resolve
    _audit("alert.resolve", group, group)
    transaction.on_commit(lambda: dispatch.alert_groups_settle(countdown=hold_down() + 1))


def hold_down() -> int:
    """Seconds a resolved group waits before it says "working again" (a flap inside it is
    absorbed without an update)."""
    return int(settings.PORTAL_ALERTS_HOLD_DOWN_SECONDS)


def alert_groups_settle(*, now: dt.datetime | None = None) -> int:
    """Groups resolved for longer than the hold-down: their open incident gets the update "the
    monitoring sees it working again" and waits for a person to confirm the end (an incident
    is never ended here). Returns how many groups settled."""
    now = now or timezone.now()
    settled = 0
    due = AlertGroup.objects.filter(
        state=GroupState.RESOLVED, resolved_at__lte=now - dt.timedelta(seconds=hold_down())
    ).values_list("pk", flat=True)
    for pk in list(due):
        with transaction.atomic():
            group = AlertGroup.objects.select_for_update().get(pk=pk)
            if group.state != GroupState.RESOLVED:
                continue
            incident = group.incident
            group.state = GroupState.QUIET
            if incident is not None and incident.ended_at is None:
                group.state = GroupState.SETTLED
                buildings = [b.name or b.code for b in incident.buildings.all()]
                texts = incident_texts(group.klass, buildings)
                incident_update_post(
                    incident=incident, actor=None, body=texts["working"][0],
                    body_de=texts["working"][1], phase=IncidentPhase.MONITORING,
                )  # fmt: skip
                _audit("alert.working_again", incident, group)
            group.save(update_fields=["state", "updated_at"])
            settled += 1
    return settled


# --- what people do ---------------------------------------------------------------------------


@transaction.atomic
def alert_group_not_outage(*, group: AlertGroup, actor: User) -> AlertGroup:
    """A person says the group's alerts are no outage: its incident (when only this group
    opened it) leaves the status page and ends; the group opens nothing until it resolves."""
    group = AlertGroup.objects.select_for_update().get(pk=group.pk)
    incident = group.incident
    group.not_outage, group.not_outage_by, group.incident = True, actor, None
    group.save(update_fields=["not_outage", "not_outage_by", "incident", "updated_at"])
    audit_record(actor=actor, action="alert.not_outage", obj=group)
    if incident is not None and incident.ended_at is None:
        others = incident.alert_groups.exclude(pk=group.pk).exists()
        if not others and incident.created_by_id is None:
            incident.public = False
            incident.save(update_fields=["public"])
            incident_end(incident=incident, actor=actor, body=_("Not an outage."))
    return group


def alert_subscription_set(*, user: User, on: bool) -> bool:
    """Mail `user` the staff warnings (or stop); returns the new setting."""
    if on:
        AlertSubscription.objects.get_or_create(user=user)
    else:
        AlertSubscription.objects.filter(user=user).delete()
    return on


def alert_warning_mail(*, group_id: int) -> int:
    """Mail a warning to the staff who asked for them; returns how many were mailed."""
    from django.core.mail import send_mail

    group = AlertGroup.objects.filter(pk=group_id).first()
    if group is None or group.state != GroupState.FIRING:
        return 0
    addresses = sorted(
        AlertSubscription.objects.exclude(user__email="").values_list("user__email", flat=True)
    )
    if not addresses:
        return 0
    subject = f"[portal] {group.get_klass_display()}: {group.scope or 'network'}"
    lines = [group.summary, ""] + [f"{k}={v}" for k, v in sorted(group.labels.items())]
    send_mail(subject, "\n".join(lines), None, addresses)
    return len(addresses)


def firing_warnings() -> Iterable[AlertGroup]:
    """Warnings that are firing now, for the staff's Firewalls page."""
    return (
        AlertGroup.objects.filter(state=GroupState.FIRING)
        .exclude(klass__in=OUTAGE_CLASSES)
        .order_by("-fired_at")
    )
