"""Retention: every table that grows with time has a bound, and one beat task enforces them all.

Each `Rule` names a table, the time column its age is read from, the setting that says how long
rows are kept, and (where some rows must stay whatever their age) a filter of the rows that may
go. `retention_run()` applies every rule in batches: each batch is its own short transaction,
so a first run over years of rows neither holds a long lock nor bloats one transaction, and a
run that is interrupted simply continues next time (deleting what is past a cut-off is
idempotent). docs/retention.md lists every table, its bound and its setting.

Tables bounded elsewhere, at write time, are listed in `BOUNDED_ELSEWHERE` so that the test which
checks "every model is either a rule or listed" notices a new table that nobody bounded.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

import structlog
from django.apps import apps as django_apps
from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import Q
from django.utils import timezone

from apps.dhcp.models import DhcpSettings
from apps.members.privacy import former_members_erase
from apps.notifications.choices import MailStatus
from apps.tickets.choices import InboundStatus, TicketStatus

log = structlog.get_logger(__name__)

__all__ = ["BOUNDED_ELSEWHERE", "RULES", "Rule", "retention_run"]

BIG_BATCH = 100_000  # narrow rows without dependants: one DELETE ... WHERE id IN (...) each
SMALL_BATCH = 500  # rows with cascades (tickets) or large values (raw mail)


def _days(name: str) -> Callable[[], dt.timedelta]:
    return lambda: dt.timedelta(days=int(getattr(settings, name)))


def _lease_days() -> dt.timedelta:
    days = DhcpSettings.objects.filter(id=1).values_list("lease_retention_days", flat=True).first()
    return dt.timedelta(days=days or DhcpSettings._meta.get_field("lease_retention_days").default)


def _live_window() -> dt.timedelta:
    return dt.timedelta(seconds=settings.PORTAL_NOTIFICATIONS_LIVE_WINDOW_SECONDS)


def _inbound_settled() -> Q:
    return ~Q(status__in=[InboundStatus.RECEIVED, InboundStatus.QUARANTINED])


def _inbound_unsettled() -> Q:
    return ~_inbound_settled()


def _notice_not_pending() -> Q:
    return ~Q(mail_status=MailStatus.PENDING)


def _ticket_done() -> Q:
    return Q(status__in=[TicketStatus.SOLVED, TicketStatus.CLOSED])


def _incident_over() -> Q:
    return Q(ended_at__isnull=False)


def _holding_ended() -> Q:
    return Q(period__upper_inf=False)


@dataclass(frozen=True)
class Rule:
    """Rows of `model` whose `field` is older than `keep()` (and match `only()`) are deleted."""

    name: str
    model: str  # "app_label.Model"
    field: str  # the time the age is measured from; for ranges "period__endswith"
    keep: Callable[[], dt.timedelta]
    setting: str  # where an operator changes the bound (documented in docs/retention.md)
    only: Callable[[], Q] | None = None
    batch: int = BIG_BATCH
    raw: bool = True  # no dependants and no signals: plain SQL DELETE by id

    def model_class(self) -> type[models.Model]:
        return django_apps.get_model(self.model)

    def stale(self, now: dt.datetime) -> models.QuerySet:
        """The rows past the bound at `now`."""
        qs = self.model_class()._default_manager.filter(**{f"{self.field}__lt": now - self.keep()})
        return qs.filter(self.only()) if self.only else qs


RULES: tuple[Rule, ...] = (
    Rule("push_log", "firewall.PushLogEntry", "at", _days("PORTAL_RETAIN_PUSH_LOG_DAYS"),
         "PORTAL_RETAIN_PUSH_LOG_DAYS"),
    Rule("health_samples", "health.HostHealthSample", "at", _days("PORTAL_RETAIN_HEALTH_DAYS"),
         "PORTAL_RETAIN_HEALTH_DAYS (and PORTAL_HEALTH_SAMPLES_KEPT per host)"),
    Rule("inbound_mail", "tickets.InboundMail", "received_at",
         _days("PORTAL_RETAIN_INBOUND_MAIL_DAYS"), "PORTAL_RETAIN_INBOUND_MAIL_DAYS",
         only=_inbound_settled, batch=SMALL_BATCH),
    Rule("inbound_mail_unsettled", "tickets.InboundMail", "received_at",
         _days("PORTAL_RETAIN_QUARANTINED_MAIL_DAYS"), "PORTAL_RETAIN_QUARANTINED_MAIL_DAYS",
         only=_inbound_unsettled, batch=SMALL_BATCH),
    Rule("audit", "audit.AuditEntry", "at", _days("PORTAL_RETAIN_AUDIT_DAYS"),
         "PORTAL_RETAIN_AUDIT_DAYS"),
    Rule("abuse_lookups", "abuse.AbuseLookup", "asked_at", _days("PORTAL_RETAIN_AUDIT_DAYS"),
         "PORTAL_RETAIN_AUDIT_DAYS"),
    Rule("address_holdings", "abuse.AddressHolding", "period__endswith",
         _days("PORTAL_ABUSE_HISTORY_DAYS"), "PORTAL_ABUSE_HISTORY_DAYS", only=_holding_ended),
    Rule("notices", "notifications.Notice", "created_at", _days("PORTAL_RETAIN_NOTICES_DAYS"),
         "PORTAL_RETAIN_NOTICES_DAYS", only=_notice_not_pending),
    Rule("live_checks", "notifications.LiveCheck", "changed_at", _live_window,
         "PORTAL_NOTIFICATIONS_LIVE_WINDOW_SECONDS"),
    Rule("leases", "dhcp.Lease", "ends", _lease_days, "DHCP settings: keep lease history"),
    Rule("tickets", "tickets.Ticket", "last_message_at", _days("PORTAL_RETAIN_TICKETS_DAYS"),
         "PORTAL_RETAIN_TICKETS_DAYS", only=_ticket_done, batch=SMALL_BATCH, raw=False),
    Rule("incidents", "tickets.Incident", "ended_at", _days("PORTAL_RETAIN_TICKETS_DAYS"),
         "PORTAL_RETAIN_TICKETS_DAYS", only=_incident_over, batch=SMALL_BATCH, raw=False),
    Rule("sessions", "sessions.Session", "expire_date", lambda: dt.timedelta(0),
         "SESSION_COOKIE_AGE (expired sessions)"),
    Rule("login_attempts", "axes.AccessAttempt", "attempt_time",
         _days("PORTAL_RETAIN_LOGIN_LOG_DAYS"), "PORTAL_RETAIN_LOGIN_LOG_DAYS", raw=False),
    Rule("login_failures", "axes.AccessFailureLog", "attempt_time",
         _days("PORTAL_RETAIN_LOGIN_LOG_DAYS"), "PORTAL_RETAIN_LOGIN_LOG_DAYS"),
    Rule("login_log", "axes.AccessLog", "attempt_time", _days("PORTAL_RETAIN_LOGIN_LOG_DAYS"),
         "PORTAL_RETAIN_LOGIN_LOG_DAYS"),
)  # fmt: skip

# Tables bounded where they are written, or by what they describe (not by age).
BOUNDED_ELSEWHERE: dict[str, str] = {
    "firewall.RuleSetVersion": "PORTAL_RULESET_HISTORY per host, at every store",
    "firewall.MemberRevision": "one row per member",
    "dhcp.LeaseCursor": "one row per firewall host (with its host)",
    "tickets.Message": "with its ticket",
    "tickets.Attachment": "with its message",
    "tickets.TicketEvent": "with its ticket",
    "tickets.IncidentUpdate": "with its incident",
    "tickets.IncidentBroadcast": "with its incident",
    "members.StatusChange": "with its member (a former member's after the erasure period)",
    "members.RoomStay": "with its member (a former member's after the erasure period)",
    "notifications.Preference": "one row per member",
    "axes.AccessAttemptExpiration": "one row per access attempt",
    "traffic.TrafficBucket": "traffic_rollup (hourly): hours become days after "
    "PORTAL_TRAFFIC_HOURLY_DAYS, everything goes after PORTAL_TRAFFIC_KEEP_DAYS",
    "traffic.TrafficCounter": "one row per host and accounting key; unread for "
    "PORTAL_TRAFFIC_KEEP_DAYS: deleted by traffic_rollup",
}


def _delete_batch(rule: Rule, now: dt.datetime) -> int:
    """Delete up to `rule.batch` stale rows in one transaction; how many went."""
    model = rule.model_class()
    with transaction.atomic():
        ids = list(rule.stale(now).order_by().values_list("pk", flat=True)[: rule.batch])
        if not ids:
            return 0
        if not rule.raw:
            model._default_manager.filter(pk__in=ids).delete()
            return len(ids)
        table = connection.ops.quote_name(model._meta.db_table)
        pk = connection.ops.quote_name(model._meta.pk.column)
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {table} WHERE {pk} = ANY(%s)", [ids])  # noqa: S608
            return cursor.rowcount


def rule_apply(rule: Rule, *, now: dt.datetime | None = None) -> int:
    """Apply one rule until nothing stale is left; the number of rows deleted."""
    now = now or timezone.now()
    total = 0
    while True:
        deleted = _delete_batch(rule, now)
        total += deleted
        if deleted < rule.batch:
            return total


def retention_run(*, now: dt.datetime | None = None) -> dict[str, int]:
    """Apply every rule, then erase the former members who are due; rows deleted per rule."""

    now = now or timezone.now()
    deleted = {rule.name: rule_apply(rule, now=now) for rule in RULES}
    deleted["former_members_erased"] = len(former_members_erase(now=now))
    log.info("retention.run", **{k: v for k, v in deleted.items() if v})
    return deleted
