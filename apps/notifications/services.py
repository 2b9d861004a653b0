"""Writes for the notifications app: make notices, mail them in batches, keep preferences.

A notice row is made for every event at once (the member's page shows it); mail is never sent
from the request or task that made it. `notices_mail_flush` (a Celery task, kicked after the
commit and run by beat as a backstop) gathers what is pending per member and kind and sends at
most one mail per kind and member in any `PORTAL_NOTIFICATIONS_MAIL_INTERVAL` (an hour): what
comes in during that hour waits and goes out together in the next mail.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import structlog
from django.conf import settings
from django.core.mail import get_connection
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from apps.audit.services import audit_changes, audit_record
from apps.firewall.live import live_attach, live_hosts
from apps.infra.redis import redis_client
from apps.members.choices import MemberStatus
from apps.members.models import Member
from apps.network.choices import LiveStatus
from apps.notifications import dispatch
from apps.notifications.choices import LiveOutcome, LiveWhat, MailStatus, NoticeKind
from apps.notifications.mail import notices_mail
from apps.notifications.models import LiveCheck, Notice, Preference
from apps.notifications.subjects import incident_facts

if TYPE_CHECKING:
    from django.contrib.auth.models import User

log = structlog.get_logger(__name__)

FLUSH_LOCK_KEY = "portal:notifications:flush"
FLUSH_LOCK_TTL = 900  # seconds; the flush task's time limit


# --- making notices ---------------------------------------------------------------------------


def _mail_soon() -> None:
    """After the commit, ask for a flush a little later (a burst of notices gathers first)."""
    transaction.on_commit(
        lambda: dispatch.notices_mail_flush(countdown=settings.PORTAL_NOTIFICATIONS_GATHER_SECONDS)
    )


def notice_create(
    *, member: Any, kind: str, params: Mapping[str, Any], source: str = ""
) -> Notice | None:
    """Tell one member about something: a notice on their page now, a mail by the next flush.
    With `source`, a second notice about the same thing is not made (returns None)."""
    try:
        with transaction.atomic():
            notice = Notice.objects.create(
                member=member, kind=kind, params=dict(params), source=source
            )
    except IntegrityError:
        if not source:
            raise
        return None
    _mail_soon()
    return notice


def notices_create(
    *,
    member_ids: Iterable[int],
    kind: str,
    params: Mapping[str, Any],
    source: str,
    batch: int = 1000,
) -> int:
    """The same notice to many members (an outage): bulk inserts, idempotent per `source`.
    Returns how many members were asked to be told (those told before are skipped)."""
    now = timezone.now()
    ids = list(member_ids)
    for start in range(0, len(ids), batch):
        Notice.objects.bulk_create(
            [
                Notice(member_id=pk, kind=kind, params=dict(params), source=source, created_at=now)
                for pk in ids[start : start + batch]
            ],
            ignore_conflicts=True,
        )
    if ids:
        _mail_soon()
    return len(ids)


@transaction.atomic
def preference_update(
    *, member: Any, language: str, mail: Mapping[str, bool], actor: User
) -> Preference:
    """Store a member's language and mail choices (a kind left out keeps its current choice)."""
    preference, _created = Preference.objects.select_for_update().get_or_create(member=member)
    before = {"language": preference.language, **_mail_flags(preference)}
    preference.language = language
    preference.mail = {
        kind: bool(mail.get(kind, preference.wants_mail(kind))) for kind in NoticeKind.values
    }
    preference.save(update_fields=["language", "mail", "updated_at"])
    changes = audit_changes(before, {"language": language, **_mail_flags(preference)})
    if changes:
        audit_record(
            actor=actor, action="notice.preferences", obj=preference, changes=changes, member=member
        )
    return preference


def _mail_flags(preference: Preference) -> dict[str, bool]:
    return {f"mail_{kind}": preference.wants_mail(kind) for kind in NoticeKind.values}


# --- sending ------------------------------------------------------------------------------------


@contextmanager
def _flush_lock() -> Iterator[bool]:
    """One flush at a time, so the hourly limit holds however many flush tasks run at once;
    the lock expires by itself if its holder dies."""

    client = redis_client()
    token = secrets.token_hex(8)
    held = bool(client.set(FLUSH_LOCK_KEY, token, nx=True, ex=FLUSH_LOCK_TTL))
    try:
        yield held
    finally:
        if held and client.get(FLUSH_LOCK_KEY) == token:
            client.delete(FLUSH_LOCK_KEY)


def _due_groups(*, quiet_since: dt.datetime, limit: int) -> list[tuple[int, str]]:
    """(member, kind) pairs with pending notices and no mail of that kind since `quiet_since`."""
    mailed_recently = Notice.objects.filter(
        member_id=OuterRef("member_id"), kind=OuterRef("kind"), mailed_at__gt=quiet_since
    )
    return list(
        Notice.objects.filter(mail_status=MailStatus.PENDING)
        .exclude(Exists(mailed_recently))
        .order_by("member_id", "kind")
        .values_list("member_id", "kind")
        .distinct()[:limit]
    )


def notices_mail_flush(*, now: dt.datetime | None = None, groups_per_batch: int = 200) -> int:
    """Mail what is pending and due, one mail per member and kind, over one SMTP connection;
    returns the number of mails sent. Another flush running: returns 0 at once (the running
    one or the next beat takes what is left). A failing server stops the flush with OSError
    after marking what went out, so a retry sends only the rest."""
    now = now or timezone.now()
    quiet_since = now - dt.timedelta(seconds=settings.PORTAL_NOTIFICATIONS_MAIL_INTERVAL)
    sent = 0
    with _flush_lock() as held:
        if not held:
            return 0
        with get_connection() as connection:
            while groups := _due_groups(quiet_since=quiet_since, limit=groups_per_batch):
                done, handled, error = _flush_batch(groups, now=now, connection=connection)
                sent += done
                if error:
                    raise OSError(error)
                if not handled:
                    break  # every due row is locked by another writer: the next flush takes them
    if sent:
        log.info("notices.mailed", mails=sent)
    return sent


@transaction.atomic
def _flush_batch(
    groups: list[tuple[int, str]], *, now: dt.datetime, connection: Any
) -> tuple[int, int, str]:
    """Send one batch of (member, kind) groups: (mails sent, groups handled, error or "")."""
    wanted = set(groups)
    rows = list(
        Notice.objects.select_for_update(of=("self",), skip_locked=True)
        .select_related("member__user")
        .filter(mail_status=MailStatus.PENDING, member_id__in={m for m, _k in groups})
        .order_by("created_at", "id")
    )
    grouped: dict[tuple[int, str], list[Notice]] = defaultdict(list)
    for notice in rows:
        if (notice.member_id, notice.kind) in wanted:
            grouped[(notice.member_id, notice.kind)].append(notice)
    preferences = {
        p.member_id: p for p in Preference.objects.filter(member_id__in={m for m, _k in grouped})
    }
    outcome: dict[str, list[int]] = defaultdict(list)
    error, mails = "", 0
    for (member_id, kind), notices in grouped.items():
        member = notices[0].member
        preference = preferences.get(member_id) or Preference(member=member)
        ids = [n.pk for n in notices]
        if not preference.wants_mail(kind):
            outcome[MailStatus.OFF] += ids
            continue
        if not member.user.email:
            outcome[MailStatus.NO_ADDRESS] += ids
            continue
        message = notices_mail(
            member=member,
            languages=preference.languages(),
            notices=notices,
            connection=connection,
        )
        try:
            message.send(fail_silently=False)
        except Exception as exc:  # the server refused or went away: keep what was sent
            error = f"{type(exc).__name__}: {exc}"[:2000]
            break
        outcome[MailStatus.SENT] += ids
        mails += 1
    for status, ids in outcome.items():
        Notice.objects.filter(pk__in=ids).update(
            mail_status=status, mailed_at=now if status == MailStatus.SENT else None
        )
    return mails, len(grouped), error


# --- what notices are made about --------------------------------------------------------------


def incident_notices_create(*, incident_id: int) -> int:
    """Tell every member living in a building of a public incident (once per member, however
    often this runs); returns how many members were asked to be told. Runs in a task: an outage
    of thousands of members never holds the request that declared it."""
    incident = incident_facts(incident_id)  # read by the tickets app (subjects.py)
    if incident is None:
        return 0
    member_ids = (
        Member.objects.filter(room__building__in=incident.building_ids)
        .exclude(status=MemberStatus.ENDED)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    params = {
        "incident": incident.pk,
        "title": incident.title,
        "title_de": incident.title_de,
        "description": incident.description,
        "description_de": incident.description_de,
        "buildings": list(incident.building_codes),
        "started_at": incident.started_at.isoformat(),
    }
    with transaction.atomic():
        told = notices_create(
            member_ids=member_ids,
            kind=NoticeKind.INCIDENT,
            params=params,
            source=f"incident:{incident.pk}",
        )
        audit_record(
            actor=None,
            action="notice.incident",
            obj=incident.row,
            changes={"members": [None, told], "buildings": [None, params["buildings"]]},
        )
    return told


# What the live checks watch: (what, model, related rows its label and member need).
_WATCHED: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (LiveWhat.DEVICE, "network.Device", ()),
    (LiveWhat.FORWARD, "network.PortForward", ()),
    (LiveWhat.OPENING, "network.Ipv6Opening", ("device",)),
)


def _member_id(what: str, row: Any) -> int:
    return int(row.device.member_id if what == LiveWhat.OPENING else row.member_id)


def _label(what: str, row: Any) -> str:
    if what == LiveWhat.DEVICE:
        return str(row.name)
    if what == LiveWhat.OPENING:
        return f"{row} ({row.device.name})"
    return str(row)


def _live_outcome(live: Mapping[str, Any], *, changed: dt.datetime) -> tuple[str, float] | None:
    """(outcome, delay in seconds) of a row's live state; None while it is still pending."""

    state = live["state"]
    if state == LiveStatus.FAILED:
        return LiveOutcome.FAILED, 0.0
    if state == LiveStatus.OFF:
        return LiveOutcome.OFF, 0.0
    if state != LiveStatus.LIVE or live["since"] is None:
        return None
    delay = (live["since"] - changed).total_seconds()
    late = delay > settings.PORTAL_NOTIFICATIONS_LIVE_LATE_SECONDS
    return (LiveOutcome.LATE if late else LiveOutcome.ON_TIME), delay


def live_checks_run(*, now: dt.datetime | None = None, limit: int = 2000) -> list[Notice]:
    """Decide how recent changes of devices, forwards and openings ended on the firewalls and
    tell the member when one failed or went live later than
    `PORTAL_NOTIFICATIONS_LIVE_LATE_SECONDS` after the change. Each change is decided once
    (`LiveCheck`); changes still pending are looked at again next time, until they are older
    than `PORTAL_NOTIFICATIONS_LIVE_WINDOW_SECONDS`. Returns the notices made."""
    from django.apps import apps as django_apps

    now = now or timezone.now()
    since = now - dt.timedelta(seconds=settings.PORTAL_NOTIFICATIONS_LIVE_WINDOW_SECONDS)
    LiveCheck.objects.filter(changed_at__lt=since).delete()  # never looked at again
    hosts = live_hosts()
    made: list[Notice] = []
    for what, model_path, related in _WATCHED:
        model = django_apps.get_model(model_path)
        decided = LiveCheck.objects.filter(
            what=what, object_id=OuterRef("pk"), changed_at=OuterRef("updated_at")
        )
        rows = list(
            model.objects.filter(updated_at__gte=since, updated_at__lte=now)
            .exclude(Exists(decided))
            .select_related(*related)
            .order_by("-updated_at")[:limit]  # newest first: old pending rows never starve new ones
        )
        if not rows:
            continue
        live_attach(rows, hosts=hosts)
        for row in rows:
            decision = _live_outcome(row.live, changed=row.updated_at)
            if decision is not None:
                notice = _live_decide(what, row, *decision)
                if notice is not None:
                    made.append(notice)
    return made


@transaction.atomic
def _live_decide(what: str, row: Any, outcome: str, delay: float) -> Notice | None:
    """Record one change's outcome (once: a concurrent run loses on the unique constraint) and
    make the member's notice when it failed or was late."""
    member_id = _member_id(what, row)
    try:
        with transaction.atomic():
            LiveCheck.objects.create(
                what=what,
                object_id=row.pk,
                changed_at=row.updated_at,
                outcome=outcome,
                member_id=member_id,
            )
    except IntegrityError:
        return None
    if outcome not in (LiveOutcome.FAILED, LiveOutcome.LATE):
        return None

    member = Member.objects.get(pk=member_id)
    params = {
        "what": what,
        "object_id": row.pk,
        "label": _label(what, row),
        "outcome": outcome,
        "reason": row.live.get("reason", ""),
        "delay": round(delay),
        "changed_at": row.updated_at.isoformat(),
    }
    notice = notice_create(
        member=member,
        kind=NoticeKind.LIVE,
        params=params,
        source=f"{what}:{row.pk}:{row.updated_at.timestamp():.6f}",
    )
    if notice is not None:
        audit_record(
            actor=None,
            action=f"notice.live_{outcome}",
            obj=row,
            changes={"changed_at": [None, params["changed_at"]], "delay": [None, params["delay"]]},
            member=member,
        )
    return notice
