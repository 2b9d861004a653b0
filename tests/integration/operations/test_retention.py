"""Retention: for every table that grows, the beat task deletes old rows and keeps recent ones."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange
from django.utils import timezone

from apps.operations.retention import BOUNDED_ELSEWHERE, RULES, Rule, rule_apply
from tests.factories import AddressHoldingFactory, member_registered

pytestmark = pytest.mark.django_db
NOW = timezone.now()


def _host() -> Any:
    from apps.firewall.models import FirewallHost

    return FirewallHost.objects.get_or_create(name="fw1", defaults={"address": "10.255.255.11"})[0]


def _restamp(obj: Any, **fields: Any) -> Any:
    """Set auto_now_add columns after the insert (they ignore what create() is given)."""
    type(obj).objects.filter(pk=obj.pk).update(**fields)
    return obj


def _push_log(at: dt.datetime) -> Any:
    from apps.firewall.models import PushLogEntry

    return PushLogEntry.objects.create(host=_host(), step="apply", ok=True, at=at)


def _health(at: dt.datetime) -> Any:
    from apps.health.models import HostHealthSample

    return HostHealthSample.objects.create(host=_host(), at=at, reachable=True)


def _mail(status: str) -> Callable[[dt.datetime], Any]:
    def make(at: dt.datetime) -> Any:
        from apps.tickets.models import InboundMail

        return InboundMail.objects.create(received_at=at, raw=b"Subject: x\r\n\r\nx", status=status)

    return make


def _audit(at: dt.datetime) -> Any:
    from apps.audit.services import audit_record

    member = member_registered()
    return _restamp(audit_record(actor=None, action="test", obj=member), at=at)


def _lookup(at: dt.datetime) -> Any:
    from apps.abuse.models import AbuseLookup

    row = AbuseLookup.objects.create(address="198.51.100.7", at=at, reason="r", verdict="nobody")
    return _restamp(row, asked_at=at)


def _holding(ended: bool) -> Callable[[dt.datetime], Any]:
    def make(at: dt.datetime) -> Any:
        n = _holding.n = getattr(_holding, "n", 0) + 1  # type: ignore[attr-defined]
        period = DateTimeTZRange(at - dt.timedelta(days=30), at if ended else None)
        return AddressHoldingFactory(address=f"198.51.100.{n % 250 + 1}", period=period)

    return make


def _notice(mail_status: str) -> Callable[[dt.datetime], Any]:
    def make(at: dt.datetime) -> Any:
        from apps.notifications.models import Notice

        sent = {"mailed_at": at} if mail_status == "sent" else {}
        return Notice.objects.create(
            member=member_registered(), kind="incident", created_at=at, mail_status=mail_status,
            **sent,
        )  # fmt: skip

    return make


def _live_check(at: dt.datetime) -> Any:
    from apps.notifications.models import LiveCheck

    return LiveCheck.objects.create(
        what="device", object_id=1, changed_at=at, outcome="on_time", member=member_registered()
    )


def _lease(at: dt.datetime) -> Any:
    from apps.dhcp.models import Lease

    return Lease.objects.create(
        host_name="fw1", mac="02:00:00:00:00:01", address="10.100.1.9",
        starts=at - dt.timedelta(hours=1), ends=at, seen_at=at,
    )  # fmt: skip


def _ticket(status: str) -> Callable[[dt.datetime], Any]:
    def make(at: dt.datetime) -> Any:
        from apps.tickets.models import Message, Ticket

        ticket = Ticket.objects.create(subject="s", status=status, last_message_at=at)
        Message.objects.create(ticket=ticket, kind="inbound", body_text="hello")
        return ticket

    return make


def _incident(ended: bool) -> Callable[[dt.datetime], Any]:
    def make(at: dt.datetime) -> Any:
        from apps.tickets.models import Incident

        return Incident.objects.create(
            title="t", started_at=at - dt.timedelta(hours=1), ended_at=at if ended else None
        )

    return make


def _session(at: dt.datetime) -> Any:
    from django.contrib.sessions.models import Session

    return Session.objects.create(session_key=f"k{at.timestamp()}", session_data="", expire_date=at)


def _axes(model: str) -> Callable[[dt.datetime], Any]:
    def make(at: dt.datetime) -> Any:
        extra = {"failures_since_start": 1} if model == "AccessAttempt" else {}
        row = django_apps.get_model("axes", model).objects.create(
            username="ann", ip_address="127.0.0.1", user_agent=f"ua{at.timestamp()}", **extra
        )
        return _restamp(row, attempt_time=at)

    return make


# rule -> (make a row at a time, an old row the rule must keep whatever its age or None)
MAKERS: dict[str, tuple[Callable[[dt.datetime], Any], Callable[[dt.datetime], Any] | None]] = {
    "push_log": (_push_log, None),
    "health_samples": (_health, None),
    "inbound_mail": (_mail("processed"), _mail("quarantined")),
    "inbound_mail_unsettled": (_mail("quarantined"), _mail("processed")),
    "audit": (_audit, None),
    "abuse_lookups": (_lookup, None),
    "address_holdings": (_holding(ended=True), _holding(ended=False)),
    "notices": (_notice("sent"), _notice("pending")),
    "live_checks": (_live_check, None),
    "leases": (_lease, None),
    "tickets": (_ticket("closed"), _ticket("open")),
    "incidents": (_incident(ended=True), _incident(ended=False)),
    "sessions": (_session, None),
    "login_attempts": (_axes("AccessAttempt"), None),
    "login_failures": (_axes("AccessFailureLog"), None),
    "login_log": (_axes("AccessLog"), None),
}


def _exists(obj: Any) -> bool:
    return type(obj)._default_manager.filter(pk=obj.pk).exists()


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_old_rows_go_recent_rows_stay(rule: Rule) -> None:
    make, protected = MAKERS[rule.name]
    keep = rule.keep()
    old = make(NOW - keep - dt.timedelta(days=1))
    recent = make(NOW - keep + dt.timedelta(hours=1))
    kept = protected(NOW - keep - dt.timedelta(days=1)) if protected else None

    assert rule_apply(rule, now=NOW) == 1
    assert not _exists(old)
    assert _exists(recent)
    assert kept is None or _exists(kept)
    assert rule_apply(rule, now=NOW) == 0  # idempotent: a second run finds nothing


def test_every_growing_table_is_bounded() -> None:
    """A new model must be given a rule or say in BOUNDED_ELSEWHERE what bounds it; settings
    and catalogue tables (buildings, pools, hosts...) are the ones listed as configuration."""
    configuration = {
        "members.Building", "members.Room", "members.Member", "network.Subnet",
        "network.PublicPool", "network.PublicAddress", "network.Device", "network.NetworkSettings",
        "network.PortForward", "network.Ipv6Opening", "network.ShapingProfile",
        "testaccess.TestAccess", "network.BlockedPort", "network.ManagementNetwork",
        "firewall.Site", "firewall.FirewallHost", "dhcp.DhcpSettings", "dhcp.RegistrationRange",
        "tickets.Queue", "tickets.CannedResponse",
    }  # fmt: skip
    ruled = {rule.model for rule in RULES}
    ours = ("members", "network", "testaccess", "firewall", "dhcp", "tickets", "abuse", "audit",
            "health", "traffic")  # fmt: skip
    models = {
        m._meta.label
        for m in django_apps.get_models()
        if m._meta.app_label in (*ours, "notifications")
    }
    assert models - ruled - set(BOUNDED_ELSEWHERE) - configuration == set()


def test_batches_delete_everything_past_the_bound(settings: Any) -> None:
    """More stale rows than one batch: the rule loops until none is left."""
    from dataclasses import replace

    from apps.firewall.models import PushLogEntry

    rule = replace(next(r for r in RULES if r.name == "push_log"), batch=3)
    for _ in range(7):
        _push_log(NOW - dt.timedelta(days=settings.PORTAL_RETAIN_PUSH_LOG_DAYS + 1))
    _push_log(NOW)
    assert rule_apply(rule, now=NOW) == 7
    assert PushLogEntry.objects.count() == 1


def test_beat_task_runs_every_rule(settings: Any) -> None:
    """The scheduled task (called as beat calls it) bounds each table and reports the counts."""
    from workers.retention import retention_run

    assert settings.CELERY_BEAT_SCHEDULE["retention"]["task"] == "workers.retention.retention_run"
    _push_log(NOW - dt.timedelta(days=settings.PORTAL_RETAIN_PUSH_LOG_DAYS + 1))
    _mail("processed")(NOW - dt.timedelta(days=settings.PORTAL_RETAIN_INBOUND_MAIL_DAYS + 1))
    counts = retention_run()
    assert counts["push_log"] == 1
    assert counts["inbound_mail"] == 1
    assert set(counts) >= {rule.name for rule in RULES}
