"""Incidents: declare, post updates, end, link tickets, answer all of them at once (mass reply,
in each requester's language) and solve them together."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.apps import apps as django_apps
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from apps.core.moments import moment_check
from apps.notifications.models import Preference
from apps.tickets import dispatch
from apps.tickets.choices import ACTIVE_STATUSES, IncidentPhase, MessageKind, TicketStatus
from apps.tickets.models import (
    Incident,
    IncidentBroadcast,
    IncidentUpdate,
    Message,
    Ticket,
    TicketEvent,
)
from apps.tickets.services.helpers import (
    TicketError,
    _audit,
    _msgid,
    _reply_subject,
    _thread_headers,
    placeholders_fill,
)
from apps.tickets.status import status_cache_refresh

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _matching_q(keywords: list[str]) -> Q:
    condition = Q(pk__in=[])
    for keyword in (k.strip() for k in keywords):
        if keyword:
            body = Message.objects.filter(
                ticket=OuterRef("pk"), kind=MessageKind.INBOUND, body_text__icontains=keyword
            )
            condition |= Q(subject__icontains=keyword) | Q(Exists(body))
    return condition


def _clean_list(values: Iterable[str]) -> list[str]:
    return sorted({v.strip()[:80] for v in values if v and v.strip()})


@transaction.atomic
def incident_declare(
    *,
    actor: User | None,
    title: str,
    description: str = "",
    severity: str = "major",
    affected: Iterable[str] = (),
    keywords: Iterable[str] = (),
    started_at: Any = None,
    public: bool = True,
    buildings: Iterable[Any] = (),
    title_de: str = "",
    description_de: str = "",
) -> Incident:
    """Declare an incident and link the active tickets since its start that mention it or
    come from members living in an affected building."""
    if not title.strip():
        raise TicketError(_("An incident needs a title."))
    if started_at is not None:
        try:
            moment_check(started_at)
        except ValueError as exc:
            raise TicketError(str(exc)) from None
    incident = Incident.objects.create(
        title=title.strip()[:200],
        title_de=title_de.strip()[:200],
        description=description.strip(),
        severity=severity,
        affected=_clean_list(affected),
        keywords=_clean_list(keywords),
        started_at=started_at or timezone.now(),
        public=public,
        created_by=actor,
    )
    if description.strip():
        IncidentUpdate.objects.create(
            incident=incident,
            body=description.strip(),
            body_de=description_de.strip(),
            author=actor,
        )
    buildings = list(buildings)
    if buildings:
        incident.buildings.set(buildings)
    _audit(actor=actor, action="incident.declare", obj=incident)
    _tickets_autolink(incident, keywords=incident.keywords, buildings=buildings, actor=actor)
    transaction.on_commit(status_cache_refresh)
    if buildings and incident.public and django_apps.is_installed("apps.notifications"):
        # Thousands of members may live there: their notices are made by a task, never here.
        incident_id = incident.pk
        transaction.on_commit(lambda: dispatch.incident_notices_create(incident_id))
    return incident


def _tickets_autolink(
    incident: Incident, *, keywords: list[str], buildings: list[Any], actor: User | None
) -> None:
    """Link the unlinked active tickets since the start that mention a keyword or come from
    members living in one of `buildings`."""
    if not keywords and not buildings:
        return
    condition = _matching_q(keywords)
    if buildings:
        condition |= Q(requester__member__room__building__in=buildings)
    candidates = Ticket.objects.filter(
        incident__isnull=True, status__in=ACTIVE_STATUSES, created_at__gte=incident.started_at
    ).filter(condition)
    incident_tickets_link(incident=incident, tickets=candidates, actor=actor, auto=True)


@transaction.atomic
def incident_buildings_add(
    *, incident: Incident, buildings: Iterable[Any], actor: User | None
) -> list[Any]:
    """Widen an incident to more buildings (their tickets since the start are linked); returns
    the buildings that were not affected before."""
    known = set(incident.buildings.values_list("pk", flat=True))
    added = [b for b in buildings if b.pk not in known]
    if added:
        incident.buildings.add(*added)
        names = ", ".join(b.name or b.code for b in added)
        _audit(actor=actor, action="incident.buildings_add", obj=incident, detail=names)
        _tickets_autolink(incident, keywords=[], buildings=added, actor=actor)
        transaction.on_commit(status_cache_refresh)
    return added


@transaction.atomic
def incident_edit(
    *,
    incident: Incident,
    actor: User,
    title: str,
    title_de: str = "",
    public: bool = True,
    buildings: Iterable[Any] = (),
) -> Incident:
    """Change what an incident says and whom it concerns (tickets of added buildings link)."""
    if not title.strip():
        raise TicketError(_("An incident needs a title."))
    incident = Incident.objects.select_for_update().get(pk=incident.pk)
    buildings = list(buildings)
    before = {"title": incident.title, "title_de": incident.title_de, "public": incident.public}
    incident.title, incident.title_de = title.strip()[:200], title_de.strip()[:200]
    incident.public = public
    incident.save(update_fields=["title", "title_de", "public"])
    changed = [k for k, v in before.items() if getattr(incident, k) != v]
    _audit(actor=actor, action="incident.edit", obj=incident, detail=", ".join(changed))
    old = set(incident.buildings.values_list("pk", flat=True))
    incident.buildings.set(buildings)
    added = [b for b in buildings if b.pk not in old]
    _tickets_autolink(incident, keywords=[], buildings=added, actor=actor)
    transaction.on_commit(status_cache_refresh)
    return incident


@transaction.atomic
def incident_merge(*, source: Incident, target: Incident, actor: User) -> Incident:
    """Fold `source` into `target`: its buildings and tickets move over, it ends with an update
    naming the incident it continues in."""
    if source.pk == target.pk:
        raise TicketError(_("An incident cannot be merged into itself."))
    first, second = sorted([source.pk, target.pk])
    locked = {i.pk: i for i in Incident.objects.select_for_update().filter(pk__in=[first, second])}
    source, target = locked[source.pk], locked[target.pk]
    if target.ended_at is not None:
        raise TicketError(_("Merge into an incident that has not ended."))
    target.buildings.add(*source.buildings.all())
    target.affected = _clean_list([*target.affected, *source.affected])
    target.started_at = min(target.started_at, source.started_at)
    target.save(update_fields=["affected", "started_at"])
    moved = Ticket.objects.filter(incident=source).update(incident=target)
    _audit(
        actor=actor,
        action="incident.merge",
        obj=target,
        detail=f"{source.number} -> {target.number}, {moved} tickets",
    )
    if source.ended_at is None:
        source.ended_at = timezone.now()
        source.save(update_fields=["ended_at"])
        IncidentUpdate.objects.create(
            incident=source,
            phase=IncidentPhase.RESOLVED,
            body=_("Continued in incident %(number)s.") % {"number": target.number},
            author=actor,
        )
    transaction.on_commit(status_cache_refresh)
    return target


@transaction.atomic
def incident_update_post(
    *,
    incident: Incident,
    actor: User | None,
    body: str,
    phase: str = IncidentPhase.INVESTIGATING,
    body_de: str = "",
) -> IncidentUpdate:
    """A public update on an incident (with a German text: shown to German readers)."""
    if not body.strip():
        raise TicketError(_("The update is empty."))
    update = IncidentUpdate.objects.create(
        incident=incident, body=body.strip(), body_de=body_de.strip(), phase=phase, author=actor
    )
    _audit(actor=actor, action="incident.update", obj=incident, detail=phase)
    transaction.on_commit(status_cache_refresh)
    return update


@transaction.atomic
def incident_end(*, incident: Incident, actor: User, body: str = "") -> Incident:
    """End an incident (with a closing update)."""
    incident = Incident.objects.select_for_update().get(pk=incident.pk)
    if incident.ended_at is not None:
        return incident
    incident.ended_at = timezone.now()
    incident.save(update_fields=["ended_at"])
    IncidentUpdate.objects.create(
        incident=incident,
        phase=IncidentPhase.RESOLVED,
        body=body.strip() or _("The problem is solved."),
        author=actor,
    )
    _audit(actor=actor, action="incident.end", obj=incident)
    transaction.on_commit(status_cache_refresh)
    return incident


@transaction.atomic
def incident_tickets_link(
    *, incident: Incident | None, tickets: Iterable[Ticket], actor: User, auto: bool = False
) -> int:
    """Link tickets to an incident by hand (or unlink with incident=None)."""
    count = 0
    for ticket in tickets:
        if ticket.incident_id == (incident.pk if incident else None):
            continue
        ticket.incident = incident
        ticket.save(update_fields=["incident", "updated_at"])
        label = incident.title if incident else "-"
        _audit(
            actor=actor,
            action="ticket.incident_link",
            obj=ticket,
            ticket=ticket,
            detail=("auto: " if auto else "") + label,
        )
        count += 1
    return count


def _requester_languages(tickets: list[Ticket]) -> dict[int, str]:
    """Each ticket's requester's chosen language ("" when none was chosen or no member wrote)."""
    if not django_apps.is_installed("apps.notifications"):
        return {}

    users = {t.requester_id for t in tickets if t.requester_id}
    chosen = dict(
        Preference.objects.filter(member__user_id__in=users)
        .exclude(language="")
        .values_list("member__user_id", "language")
    )
    return {t.pk: chosen.get(t.requester_id, "") for t in tickets}


def canned_text(*, canned: Any, ticket: Ticket, actor: User) -> str:
    """A canned response filled in for `ticket`, in its requester's language as a mass reply
    is: German for German, English for English, both when nothing was chosen (and English
    alone when the response has no German text)."""
    language = _requester_languages([ticket]).get(ticket.pk, "")
    return mass_reply_text(
        ticket=ticket, actor=actor, body=canned.body, body_de=canned.body_de, language=language
    )


def mass_reply_languages(language: str, *, body_de: str) -> list[str]:
    """The languages a mass reply is written in for a requester who chose `language`: German
    only with a German text; both (as the portal's notice mails) when nothing was chosen."""
    if not body_de:
        return ["en"]
    if language in ("en", "de"):
        return [language]
    return ["en", "de"]


def mass_reply_text(
    *, ticket: Ticket, actor: User, body: str, body_de: str = "", language: str = ""
) -> str:
    """The text `ticket` receives, each language's part filled in that language."""
    texts = {"en": body, "de": body_de}
    parts = []
    for code in mass_reply_languages(language, body_de=body_de):
        with translation.override(code):
            parts.append(placeholders_fill(texts[code], ticket=ticket, actor=actor))
    return "\n\n-- \n\n".join(parts)


def _mass_reply_texts(
    tickets: list[Ticket], *, actor: User, body: str, body_de: str
) -> list[tuple[Ticket, str, str]]:
    """(ticket, its languages such as "en+de", the text it receives) for each ticket."""
    chosen = _requester_languages(tickets)
    rows = []
    for ticket in tickets:
        language = chosen.get(ticket.pk, "")
        kind = "+".join(mass_reply_languages(language, body_de=body_de))
        text = mass_reply_text(
            ticket=ticket, actor=actor, body=body, body_de=body_de, language=language
        )
        rows.append((ticket, kind, text))
    return rows


def _mass_reply_tickets(incident: Incident) -> QuerySet[Ticket]:
    return (
        Ticket.objects.filter(incident=incident, status__in=ACTIVE_STATUSES)
        .select_related("requester")
        .order_by("pk")
    )


@dataclass(frozen=True)
class MassReplyPreview:
    """What a mass reply would do: how many tickets, in which languages, one text of each."""

    count: int
    languages: dict[str, int]  # "en", "de", "en+de" -> tickets
    examples: list[tuple[Ticket, str]]  # one ticket per kind of text, and what it would get


def incident_mass_reply_preview(
    *, incident: Incident, actor: User, body: str, body_de: str = ""
) -> MassReplyPreview:
    """Render the reply for real tickets of the incident without sending or storing anything."""
    body, body_de = body.strip(), body_de.strip()
    counts: dict[str, int] = {}
    examples: list[tuple[Ticket, str]] = []
    rows = _mass_reply_texts(
        list(_mass_reply_tickets(incident)), actor=actor, body=body, body_de=body_de
    )
    for ticket, kind, text in rows:
        counts[kind] = counts.get(kind, 0) + 1
        if counts[kind] == 1:
            examples.append((ticket, text))
    return MassReplyPreview(count=len(rows), languages=counts, examples=examples)


@transaction.atomic
def incident_mass_reply(
    *, incident: Incident, actor: User, body: str, body_de: str = "", solve: bool = False
) -> IncidentBroadcast:
    """Answer every active linked ticket at once: one message per ticket, in its own thread,
    in its requester's language when a German text is given.

    The messages are written here, once (unique per ticket and broadcast); the task only
    mails the unsent ones, so retries cannot answer a ticket twice.
    """
    body, body_de = body.strip(), body_de.strip()
    if not body:
        raise TicketError(_("The reply is empty."))
    broadcast = IncidentBroadcast.objects.create(
        incident=incident, body=body, body_de=body_de, solve=solve, created_by=actor
    )
    tickets = list(_mass_reply_tickets(incident).select_for_update(of=("self",)))
    thread: dict[int, list[Message]] = {t.pk: [] for t in tickets}
    for m in (
        Message.objects.filter(ticket__in=tickets)
        .exclude(kind=MessageKind.NOTE)
        .exclude(message_id="")
        .order_by("created_at", "id")
        .only("ticket_id", "message_id", "kind")
    ):
        thread[m.ticket_id].append(m)
    now = timezone.now()
    messages = []
    for ticket, _kind, text in _mass_reply_texts(tickets, actor=actor, body=body, body_de=body_de):
        in_reply_to, references = _thread_headers(ticket, thread[ticket.pk])
        messages.append(
            Message(
                ticket=ticket,
                kind=MessageKind.OUTBOUND,
                author=actor,
                from_name=actor.get_full_name(),
                to_email=ticket.requester_email,
                subject=_reply_subject(ticket),
                body_text=text,
                message_id=_msgid(ticket),
                in_reply_to=in_reply_to,
                references=references,
                broadcast=broadcast,
                created_at=now,
            )
        )
        ticket.status = TicketStatus.SOLVED if solve else TicketStatus.WAITING
        ticket.solved_at = now if solve else None
        ticket.first_response_at = ticket.first_response_at or now
        ticket.last_message_at = now
        ticket.updated_at = now
    Message.objects.bulk_create(messages)
    Ticket.objects.bulk_update(
        tickets, ["status", "solved_at", "first_response_at", "last_message_at", "updated_at"]
    )
    TicketEvent.objects.bulk_create(
        TicketEvent(ticket=t, actor=actor, action="ticket.mass_reply", detail=incident.title[:300])
        for t in tickets
    )
    _audit(
        actor=actor, action="incident.mass_reply", obj=incident, detail=f"{len(tickets)} tickets"
    )
    broadcast_id = broadcast.pk
    transaction.on_commit(lambda: dispatch.incident_broadcast_send(broadcast_id))
    return broadcast


@transaction.atomic
def incident_tickets_solve(*, incident: Incident, actor: User) -> int:
    """Mark every active ticket of the incident solved (no mail; see incident_mass_reply)."""
    tickets = list(
        Ticket.objects.select_for_update().filter(incident=incident, status__in=ACTIVE_STATUSES)
    )
    now = timezone.now()
    for ticket in tickets:
        ticket.status, ticket.solved_at, ticket.updated_at = TicketStatus.SOLVED, now, now
    Ticket.objects.bulk_update(tickets, ["status", "solved_at", "updated_at"])
    TicketEvent.objects.bulk_create(
        TicketEvent(
            ticket=t, actor=actor, action="ticket.update", detail="status=solved (incident)"
        )
        for t in tickets
    )
    _audit(
        actor=actor, action="incident.solve_tickets", obj=incident, detail=f"{len(tickets)} tickets"
    )
    return len(tickets)
