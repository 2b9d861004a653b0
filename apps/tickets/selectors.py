"""Reads of the tickets app; every ticket query starts from `visible_to(actor)`."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, time, timedelta
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from apps.accounts.roles import Role, has_role
from apps.firewall.live import live_attach
from apps.health.selectors import firewall_host_states
from apps.members.selectors import member_of_user
from apps.network.selectors import member_devices, member_port_forwards
from apps.notifications.subjects import IncidentFacts
from apps.tickets.choices import ACTIVE_STATUSES, InboundStatus, MessageKind, TicketStatus
from apps.tickets.models import Attachment, InboundMail, Incident, Message, Ticket

if TYPE_CHECKING:
    from django.contrib.auth.models import User

User = get_user_model()

OPEN_INCIDENTS_SHOWN = 5  # on a ticket's side panel; the incident list has all


def ticket_search_q(text: str) -> Q:
    """Every word must appear in the subject, the sender or a message's text."""
    condition = Q()
    for term in text.split()[:8]:
        term_q = (
            Q(subject__icontains=term)
            | Q(requester_email__icontains=term)
            | Q(requester_name__icontains=term)
            | Q(
                Exists(
                    Message.objects.filter(ticket=OuterRef("pk")).filter(
                        Q(body_text__icontains=term) | Q(from_email__icontains=term)
                    )
                )
            )
        )
        if term.lstrip("#").isdigit():
            term_q |= Q(pk=int(term.lstrip("#")))
        condition &= term_q
    return condition


def ticket_list(*, actor: User, filters: Mapping[str, Any] | None = None) -> QuerySet[Ticket]:
    """Tickets `actor` may see, filtered by status, queue, assignee, incident, tag and text."""
    filters = filters or {}
    qs = Ticket.objects.visible_to(actor).select_related("assignee", "queue", "incident")
    status = filters.get("status") or ""
    if status == "active":
        qs = qs.filter(status__in=ACTIVE_STATUSES)
    elif status in TicketStatus.values:
        qs = qs.filter(status=status)
    if queue := filters.get("queue"):
        qs = qs.filter(queue__slug=queue)
    assignee = filters.get("assignee") or ""
    if assignee == "me":
        qs = qs.filter(assignee=actor)
    elif assignee == "none":
        qs = qs.filter(assignee__isnull=True)
    elif assignee.isdigit():
        qs = qs.filter(assignee_id=int(assignee))
    incident = str(filters.get("incident") or "")
    if incident == "none":
        qs = qs.filter(incident__isnull=True)
    elif incident == "any":
        qs = qs.filter(incident__isnull=False)
    elif incident.isdigit():
        qs = qs.filter(incident_id=int(incident))
    if tag := filters.get("tag"):
        qs = qs.filter(tags__contains=[str(tag).lower()])
    if text := (filters.get("q") or filters.get("search") or "").strip():
        qs = qs.filter(ticket_search_q(text))
    return qs.order_by("-last_message_at", "-id")


def ticket_get(*, actor: User, pk: int) -> Ticket:
    """One visible ticket (DoesNotExist otherwise: the view answers 404)."""
    return (
        Ticket.objects.visible_to(actor)
        .select_related("requester", "assignee", "queue", "incident")
        .get(pk=pk)
    )


def ticket_thread(*, actor: User, ticket: Ticket) -> QuerySet[Message]:
    """The thread; internal notes only for support staff."""
    qs = ticket.messages.select_related("author").prefetch_related("attachments")
    if not Ticket.objects.visible_to(actor).filter(pk=ticket.pk).exists():
        return qs.none()

    if not has_role(actor, Role.SUPPORT):
        qs = qs.exclude(kind=MessageKind.NOTE)
    return qs.order_by("created_at", "id")


def attachment_get(*, actor: User, pk: int) -> Attachment | None:
    """A stored attachment of a visible ticket; notes' files only for support staff."""

    qs = Attachment.objects.filter(
        pk=pk, stored=True, message__ticket__in=Ticket.objects.visible_to(actor)
    )
    if not has_role(actor, Role.SUPPORT):
        qs = qs.exclude(message__kind=MessageKind.NOTE)
    return qs.first()


def support_staff() -> QuerySet[Any]:
    """People tickets can be assigned to."""
    return (
        User.objects.filter(Q(groups__name__in=[Role.SUPPORT, Role.ADMIN]) | Q(is_superuser=True))
        .distinct()
        .order_by("username")
    )


def incident_list(*, actor: User, current_only: bool = False) -> QuerySet[Incident]:
    """Incidents with their ticket counts (staff)."""
    qs = Incident.objects.annotate(
        ticket_count=Count("tickets"),
        active_count=Count("tickets", filter=Q(tickets__status__in=ACTIVE_STATUSES)),
    ).prefetch_related("buildings")
    if current_only:
        qs = qs.filter(ended_at__isnull=True)
    return qs.order_by("-started_at")


def quarantine_list(*, actor: User) -> QuerySet[InboundMail]:
    """Mail that could not become a ticket message, newest first."""
    return InboundMail.objects.filter(status=InboundStatus.QUARANTINED).defer("raw")


def ticket_stats(*, days: int = 30) -> dict[str, Any]:
    """Per day for the last `days`: new tickets, open at the end of the day, and the median time
    to the first response of that day's new tickets in whole minutes."""
    tz = timezone.get_current_timezone()
    today = timezone.localdate()
    start_day = today - timedelta(days=days - 1)
    start = timezone.make_aware(datetime.combine(start_day, time.min), tz)
    rows = list(
        Ticket.objects.filter(
            Q(created_at__gte=start) | Q(solved_at__isnull=True) | Q(solved_at__gte=start)
        ).values_list("created_at", "solved_at", "first_response_at")
    )
    out = []
    in_period = [r for r in rows if r[0] >= start]
    all_responses = sorted((r[2] - r[0]).total_seconds() for r in in_period if r[2])
    for offset in range(days):
        day = start_day + timedelta(days=offset)
        lo = timezone.make_aware(datetime.combine(day, time.min), tz)
        hi = lo + timedelta(days=1)
        new = [r for r in rows if lo <= r[0] < hi]
        open_count = sum(1 for r in rows if r[0] < hi and (r[1] is None or r[1] >= hi))
        responses = sorted((r[2] - r[0]).total_seconds() for r in new if r[2])
        median = round(responses[len(responses) // 2] / 60) if responses else None
        out.append({"day": day, "new": len(new), "open": open_count, "frt_minutes": median})
    summary = {
        "new": len(in_period),
        "open": out[-1]["open"] if out else 0,
        "frt_minutes": (
            round(all_responses[len(all_responses) // 2] / 60) if all_responses else None
        ),
    }
    return {"days": out, "summary": summary}


def user_for_email(address: str) -> Any | None:
    """The one user with this e-mail address (case-insensitive), or None when none or several."""
    if not address:
        return None
    users = list(get_user_model().objects.filter(email__iexact=address, is_active=True)[:2])
    return users[0] if len(users) == 1 else None


def ticket_claimed_member(*, ticket: Ticket) -> Any | None:
    """The user whose address an unverified mail ticket bears (None when verified or nobody's)."""
    return user_for_email(ticket.requester_email) if ticket.sender_unverified else None


def ticket_member_context(*, actor: User, ticket: Ticket) -> dict[str, Any]:
    """The requester's network context beside a ticket, in a constant number of queries.

    Reuses the member dashboard's selectors (membership with room, building and public IPv4;
    the devices the actor may see), so the panel shows what the member sees.
    """

    member = member_of_user(user=ticket.requester) if ticket.requester_id else None
    devices = list(member_devices(actor=actor, member=member)) if member is not None else []
    building_id = member.room.building_id if member is not None and member.room else None
    incidents = list(
        Incident.objects.current().prefetch_related("buildings").order_by("-started_at")
    )
    for incident in incidents:
        incident.affects_member = building_id is not None and any(
            b.pk == building_id for b in incident.buildings.all()
        )
    incidents.sort(key=lambda i: not i.affects_member)  # the member's building first
    more_incidents = max(0, len(incidents) - OPEN_INCIDENTS_SHOWN)
    incidents = incidents[:OPEN_INCIDENTS_SHOWN]  # the panel stays short after an outage
    forwards = None
    if member is not None:
        forwards = list(member_port_forwards(actor=actor, member=member))
        live_attach(f for f in forwards if f.enabled)

    return {
        "member": member,
        "devices": devices,
        "open_incidents": incidents,
        "more_incidents": more_incidents,
        "port_forwards": forwards,
        "firewall_health": firewall_host_states(),
    }


def incident_facts_read(incident_id: int) -> IncidentFacts | None:
    """A public, open incident in at least one building, as its residents' notices tell it
    (apps/notifications/subjects.py); None otherwise."""
    incident = Incident.objects.filter(pk=incident_id).prefetch_related("buildings").first()
    if incident is None or not incident.public or not incident.is_open:
        return None
    buildings = list(incident.buildings.all())
    if not buildings:
        return None
    return IncidentFacts(
        row=incident,
        pk=incident.pk,
        title=incident.title,
        description=incident.description,
        building_ids=tuple(b.pk for b in buildings),
        building_codes=tuple(b.code for b in buildings),
        started_at=incident.started_at,
        title_de=incident.title_de,
        description_de=_first_update_de(incident),
    )


def _first_update_de(incident: Incident) -> str:
    """The German text of the first update when it is the description's (incident_declare)."""
    first = incident.updates.order_by("created_at", "id").first()
    return first.body_de if first and first.body == incident.description else ""
