"""Reads for the members app: the office-hours search, the check-in queue, member pages."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.db.models import Case, Exists, IntegerField, OuterRef, Q, QuerySet, Value, When

from apps.accounts.roles import STAFF_ROLES, has_role
from apps.members.choices import MemberStatus
from apps.members.models import Member, Room
from apps.network.mac import mac_parse
from apps.network.models import Device, PublicAddress

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# The desk needs the right person among a screenful, not every Kowalski: the page shows the
# first SEARCH_LIMIT and says that there are more.
SEARCH_LIMIT = 25
# What a search result row shows (members/office_hours.html#search-results).
SEARCH_RESULT_FIELDS = (
    "status",
    "user__username",
    "user__first_name",
    "user__last_name",
    "user__email",
    "room__label",
    "public_ipv4__address",
)


def _members(actor: User) -> QuerySet[Member]:
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


def member_search(*, actor: User, query: str, limit: int = SEARCH_LIMIT) -> list[Member]:
    """Staff search: name, e-mail, login, room, a MAC in any notation or any IPv4/IPv6 address.

    Each kind of query first finds at most `limit` member ids with one narrow indexed lookup
    (unique indexes on MAC and addresses, a GiST index on the rooms' /64s, trigram and prefix
    indexes on names and e-mail addresses), then loads just those members with their room and
    public IPv4 in one query: no branch joins or sorts all 20,000 members.
    """
    if not has_role(actor, *STAFF_ROLES):
        return []
    query = query.strip()
    kind = search_kind(query)
    if kind == "":
        return []
    if kind == "mac":
        ids = list(Device.objects.filter(mac=mac_parse(query)).values_list("member_id", flat=True))
    elif kind in ("ipv4", "ipv6"):
        address = str(ipaddress.ip_address(query.strip("[]")))
        on_device = Q(ipv4=address) if kind == "ipv4" else Q(ipv6=address)
        ids = list(Device.objects.filter(on_device).values_list("member_id", flat=True))
        if kind == "ipv4":
            ids += PublicAddress.objects.filter(address=address, member__isnull=False).values_list(
                "member_id", flat=True
            )
        elif not ids:
            # Any other address of a room's /64 (privacy addresses): whoever lives there.
            ids = list(
                Member.objects.filter(room__ipv6_prefix__net_contains_or_equals=address)
                .order_by("pk")
                .values_list("pk", flat=True)[:limit]
            )
    else:
        # A room label or number first: names containing "A-101" would only add noise.
        # Room ids as literals: with a subquery the planner expects ~80 rooms (one number in
        # every building) and hash-joins all 20,000 rooms to sort by label.
        rooms = list(
            Room.objects.filter(Q(label__iexact=query) | Q(number=query)).values_list(
                "pk", flat=True
            )
        )
        ids = (
            list(
                Member.objects.filter(room_id__in=rooms)
                .order_by("room__label", "user__last_name", "pk")
                .values_list("pk", flat=True)[:limit]
            )
            if rooms
            else []
        )
        if not ids:
            return _members_in_order(actor, user_ids=_text_user_ids(query=query, limit=limit))
    return _members_in_order(actor, ids=list(dict.fromkeys(ids))[:limit])


def _members_in_order(
    actor: User, *, ids: list[int] | None = None, user_ids: list[int] | None = None
) -> list[Member]:
    """The members with these ids (or login ids), in that order, in one query.

    Only the columns a result row shows are loaded: building ~25 full member, login, room and
    address objects cost more than the indexed lookups that found them.
    """
    if not ids and not user_ids:
        return []
    rows = (
        Member.objects.visible_to(actor)
        .select_related("user", "room", "public_ipv4")
        .only(*SEARCH_RESULT_FIELDS)
        .order_by()
    )
    if ids:
        found = {m.pk: m for m in rows.filter(pk__in=ids)}
        return [found[pk] for pk in ids if pk in found]
    by_user = {m.user_id: m for m in rows.filter(user_id__in=user_ids)}
    return [by_user[pk] for pk in user_ids or () if pk in by_user]


def _text_user_ids(*, query: str, limit: int) -> list[int]:
    """Ids of the logins of members whose names, e-mail or login match every word, best first.

    Driven from auth_user (trigram GIN indexes for words of three letters or more, btree prefix
    indexes for shorter ones) with a LIMIT, so a common last name (~900 members in the demo data)
    never joins or sorts whole member rows: only the ids of the first `limit` logins are fetched.
    """
    terms = query.split()
    condition = Q()
    for term in terms:
        if len(term) >= 3:
            condition &= (
                Q(first_name__icontains=term)
                | Q(last_name__icontains=term)
                | Q(email__icontains=term)
                | Q(username__icontains=term)
            )
        else:
            # One or two letters: a substring would match nearly everybody and no trigram index
            # can narrow it, so only the start of a name or login counts.
            condition &= (
                Q(first_name__istartswith=term)
                | Q(last_name__istartswith=term)
                | Q(username__istartswith=term)
                | Q(email__istartswith=term)
            )
    first = terms[0]
    rank = Case(
        When(
            Q(last_name__iexact=first)
            | Q(first_name__iexact=first)
            | Q(email__iexact=query)
            | Q(username__iexact=query),
            then=Value(0),
        ),
        When(Q(last_name__istartswith=first) | Q(first_name__istartswith=first), then=Value(1)),
        default=Value(2),
        output_field=IntegerField(),
    )
    users = (
        get_user_model()
        .objects.filter(condition, Exists(Member.objects.filter(user_id=OuterRef("pk"))))
        .annotate(search_rank=rank)
        .order_by("search_rank", "last_name", "first_name", "pk")
        .values_list("pk", flat=True)
    )
    return list(users[:limit])


def pending_queue(*, actor: User) -> QuerySet[Member]:
    """Members waiting to be checked in, oldest registration first."""
    if not has_role(actor, *STAFF_ROLES):
        return Member.objects.none()
    return _members(actor).filter(status=MemberStatus.PENDING).order_by("registered_at", "pk")


def member_get(*, actor: User, pk: int) -> Member:
    """One member the actor may see (Member.DoesNotExist otherwise, which views turn into 404)."""
    return _members(actor).get(pk=pk)


def member_of_user(*, user: Any) -> Member | None:
    """The membership of a login, with room, building and public IPv4 (one query)."""
    if not getattr(user, "is_authenticated", False):
        return None
    return _members(user).filter(user=user).first()


def member_devices(*, actor: User, member: Member) -> QuerySet[Device]:
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
