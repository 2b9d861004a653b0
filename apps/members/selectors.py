"""Reads for the members app: the office-hours search, the check-in queue, member pages."""

from __future__ import annotations

import ipaddress
from typing import Any

from django.db.models import Q, QuerySet

from apps.accounts.roles import STAFF_ROLES, has_role
from apps.members.choices import MemberStatus
from apps.members.models import Member, Room
from apps.network.mac import mac_parse
from apps.network.models import Device, PublicAddress

SEARCH_LIMIT = 25


def _members(actor: Any) -> QuerySet[Member]:
    return Member.objects.visible_to(actor).select_related("user", "room__building", "public_ipv4")


def search_kind(query: str) -> str:
    """What the search box holds: 'mac', 'ipv4', 'ipv6', 'text' or '' (nothing)."""
    query = query.strip()
    if not query:
        return ""
    if mac_parse(query):
        return "mac"
    try:
        address = ipaddress.ip_address(query.strip("[]"))
    except ValueError:
        return "text"
    return f"ipv{address.version}"


def member_search(*, actor: Any, query: str, limit: int = SEARCH_LIMIT) -> list[Member]:
    """Staff search: name, e-mail, login, room, a MAC in any notation or any IPv4/IPv6 address.

    Each kind of query is answered by indexed lookups (unique indexes on MAC and addresses, a
    GiST index on the rooms' /64s, trigram indexes on names and e-mail addresses).
    """
    if not has_role(actor, *STAFF_ROLES):
        return []
    query = query.strip()
    kind = search_kind(query)
    members = _members(actor)
    if kind == "":
        return []
    if kind == "mac":
        ids = Device.objects.filter(mac=mac_parse(query)).values("member_id")
        return list(members.filter(pk__in=ids)[:limit])
    if kind in ("ipv4", "ipv6"):
        address = str(ipaddress.ip_address(query.strip("[]")))
        found = list(
            members.filter(
                pk__in=Device.objects.filter(
                    Q(ipv4=address) if kind == "ipv4" else Q(ipv6=address)
                ).values("member_id")
            )
        )
        if kind == "ipv4":
            found += list(
                members.filter(
                    pk__in=PublicAddress.objects.filter(address=address).values("member_id")
                )
            )
        elif not found:
            # Any other address of a room's /64 (privacy addresses): whoever lives there.
            rooms = Room.objects.filter(ipv6_prefix__net_contains_or_equals=address).values("pk")
            found = list(members.filter(room__in=rooms)[:limit])
        return found[:limit]
    # Text: a room label or number, then names, e-mail addresses and logins.
    rooms = Room.objects.filter(Q(label__iexact=query) | Q(number=query)).values("pk")
    in_room = list(
        members.filter(room__in=rooms).order_by("room__label", "user__last_name")[:limit]
    )
    if in_room:
        return in_room  # a room was meant; names containing "A-101" would only add noise
    condition = Q()
    for term in query.split():
        condition &= (
            Q(user__first_name__icontains=term)
            | Q(user__last_name__icontains=term)
            | Q(user__email__icontains=term)
            | Q(user__username__icontains=term)
        )
    seen = {m.pk for m in in_room}
    by_name = members.filter(condition).order_by("user__last_name", "user__first_name", "pk")
    return in_room + [m for m in by_name[:limit] if m.pk not in seen][: limit - len(in_room)]


def pending_queue(*, actor: Any) -> QuerySet[Member]:
    """Members waiting to be checked in, oldest registration first."""
    if not has_role(actor, *STAFF_ROLES):
        return Member.objects.none()
    return _members(actor).filter(status=MemberStatus.PENDING).order_by("registered_at", "pk")


def member_get(*, actor: Any, pk: int) -> Member:
    """One member the actor may see (Member.DoesNotExist otherwise, which views turn into 404)."""
    return _members(actor).get(pk=pk)


def member_of_user(*, user: Any) -> Member | None:
    """The membership of a login, with room, building and public IPv4 (one query)."""
    if not getattr(user, "is_authenticated", False):
        return None
    return _members(user).filter(user=user).first()


def member_devices(*, actor: Any, member: Member) -> QuerySet[Device]:
    """The member's devices the actor may see (one query, however many there are)."""
    return Device.objects.visible_to(actor).filter(member=member).order_by("name", "pk")


def member_history(*, member: Member) -> dict[str, Any]:
    """Status changes and room stays of a member, newest first."""
    return {
        "status_changes": member.status_changes.select_related("actor")[:50],
        "room_stays": member.room_stays.select_related("room")[:50],
    }


def room_by_label(*, label: str) -> Room | None:
    """The room written as at the desk (A-101, case-insensitive)."""
    return Room.objects.select_related("building").filter(label__iexact=label.strip()).first()


# Kept for callers from the foundation; the office-hours search is member_search now.
person_search = member_search
