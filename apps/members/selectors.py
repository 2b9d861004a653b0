"""Reads for the members app: the office-hours search, the check-in queue, member pages."""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Any

from django.db.models import (
    Func,
    Q,
    QuerySet,
    Value,
)
from django.db.models.functions import Lower
from django.utils.translation import gettext as _

from apps.accounts.roles import STAFF_ROLES, has_role
from apps.core.mac import mac_fragment, mac_parse
from apps.members.choices import MemberStatus
from apps.members.extensions import Found, member_extensions
from apps.members.models import Member, Room
from apps.members.namesearch import name_search_rows

if TYPE_CHECKING:
    from collections.abc import Iterable

    from django.contrib.auth.models import User

# The desk needs the right person among a screenful, not every Kowalski: the page shows the
# first SEARCH_LIMIT and says that there are more.
SEARCH_LIMIT = 25
# "Show all" lists up to this many (a prefix of the whole network would list every member:
# beyond this the desk is told to type more).
SEARCH_ALL_LIMIT = 500
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


# A fragment of a MAC: two-digit groups with separators as in any notation ("ee:ff",
# "dd-ee-ff"), or six hex digits or more with a digit among them ("066f00"); shorter bare hex
# such as "a101" or "cafe" is looked up as a word first (a room, a name), then as a fragment.
MAC_PART = re.compile(r"^[0-9a-f]{2}([:\-][0-9a-f]{2}){1,4}[:\-]?$|^(?=.*\d)[0-9a-f]{6,11}$", re.I)
# The start of an IPv4 address: "10.0.3", "10.0.3.", "198.18.7.2" without the last digits.
IPV4_PART = re.compile(r"^\d{1,3}(\.\d{0,3}){1,3}$")


def search_kind(query: str) -> str:
    """What the search box holds: 'mac', 'ipv4', 'ipv6', 'ipv6-prefix', 'ipv4-part',
    'mac-part', 'text' or '' (nothing). A fragment that is also a word ("cafe") is 'text'
    and looked up as both."""
    query = query.strip()
    if not query:
        return ""
    if mac_parse(query):
        return "mac"
    try:
        address = ipaddress.ip_address(query.strip("[]"))
    except ValueError:
        pass
    else:
        return f"ipv{address.version}"
    if MAC_PART.match(query):
        return "mac-part"
    if _ipv6_prefix(query) is not None:
        return "ipv6-prefix"
    if IPV4_PART.match(query):
        return "ipv4-part"
    return "text"


def _ipv6_prefix(query: str) -> ipaddress.IPv6Network | None:
    """An IPv6 prefix: "2001:db8:100:5::/64", or the start of an address ("2001:db8:100:5:")."""
    if ":" not in query:
        return None
    try:
        if "/" in query:
            return ipaddress.IPv6Network(query, strict=False)
        groups = query.rstrip(":").split(":")
        if query.count("::") or not 2 <= len(groups) < 8:
            return None
        return ipaddress.IPv6Network(f"{':'.join(groups)}::/{16 * len(groups)}", strict=False)
    except ValueError:
        return None


def _room_key(text: str) -> str:
    """A room label as typed at the desk: "a101", "A 101" and "A-101" are one key."""
    return re.sub(r"[^0-9a-z]", "", text.lower())


def _room_key_sql() -> Func:
    # The expression of the index members_room_label_compact (members migration 0005): keep them equal.
    return Func(
        Lower("label"), Value("[^0-9a-z]"), Value(""), Value("g"), function="REGEXP_REPLACE"
    )


def member_search(*, actor: User, query: str, limit: int = SEARCH_LIMIT) -> list[Member]:
    """Staff search: name, e-mail, login, room ("a101" finds A-101), a MAC in any notation or
    part of one, any IPv4/IPv6 address, the start of an IPv4 address, an IPv6 prefix.

    Each kind of query first finds at most `limit` member ids with narrow indexed lookups
    (unique indexes on MAC and addresses, GiST indexes on the rooms' /64s, trigram and prefix
    indexes on names, e-mail addresses and MACs, C-collated indexes on address text, an index
    on the compact room label), then loads just those members with their room and public IPv4
    in one query. Every member comes back with `search_match`: what matched ("MAC of device
    tv"), so that the desk sees why a row is there.
    """
    if not has_role(actor, *STAFF_ROLES):
        return []
    query = query.strip()
    kind = search_kind(query)
    if kind == "":
        return []
    found: Found = []
    if kind in ("mac", "ipv4", "ipv6", "ipv4-part"):
        found = _extensions_found(kind, query, limit)
        if kind == "ipv6" and not found and query.startswith("::"):
            # "::1a2b": the end of a device's address (its interface identifier).
            found = _extensions_found("ipv6-suffix", query, limit)
        if kind == "ipv6" and not found:
            # Any other address of a room's /64 (privacy addresses): whoever lives there.
            address = str(ipaddress.ip_address(query.strip("[]")))
            found = _rooms_found(
                Member.objects.filter(room__ipv6_prefix__net_contains_or_equals=address),
                _("address in the /64 of room {}"),
                limit,
            )
    elif kind == "ipv6-prefix":
        prefix = str(_ipv6_prefix(query))
        found = _rooms_found(
            Member.objects.filter(room__ipv6_prefix__net_overlaps=prefix),
            _("room {}'s /64 in this prefix"),
            limit,
        )
        if not found and "/" not in query:
            # "fedd:eeff": the last groups of a device's address, not the first.
            found = _extensions_found("ipv6-suffix", query, limit)
    elif kind == "mac-part":
        # "ab1012" may be room AB-1012 as well: a room first, as for any word.
        found = _room_found(query, limit) or _extensions_found(kind, query, limit)
    else:
        found = _room_found(query, limit)
        if not found:
            people = _members_in_order(
                actor, _text_found(query=query, limit=limit), limit, by_user=True
            )
            if len(people) >= limit:
                return people
            # The people first, then devices of that name ("laptop"), then, for a word that is
            # also a MAC fragment ("cafe", "beef", "aabb.cc"), the devices whose MAC holds it.
            devices = _extensions_found("device-name", query, limit - len(people))
            digits = mac_fragment(query)
            if digits and len(people) + len(devices) < limit:
                devices += _extensions_found("mac-part", digits, limit - len(people) - len(devices))
            if not devices:
                return people
            found = [(m.pk, m.search_match) for m in people] + devices
    return _members_in_order(actor, found, limit)


def _extensions_found(kind: str, query: str, limit: int) -> Found:
    """What the apps built on members find for an address or MAC query (network: devices and
    public addresses; apps/members/extensions.py)."""
    found: Found = []
    for extension in member_extensions():
        found += extension.member_search(kind=kind, query=query, limit=limit)
    return found


def _rooms_found(members: QuerySet[Member], label: str, limit: int) -> Found:
    rows = members.order_by("room__label", "pk").values_list("pk", "room__label")[:limit]
    return [(pk, label.format(room)) for pk, room in rows]


def _room_found(query: str, limit: int) -> Found:
    """Members of the room whose label or number is `query`; "a101" and "A 101" find A-101."""
    # Room ids as literals: with a subquery the planner expects ~80 rooms (one number in
    # every building) and hash-joins all rooms to sort by label.
    rooms = list(
        Room.objects.filter(Q(label__iexact=query) | Q(number=query)).values_list("pk", flat=True)
    )
    key = _room_key(query)
    if not rooms and len(key) >= 2 and any(c.isdigit() for c in key):
        rooms = list(
            Room.objects.annotate(key=_room_key_sql()).filter(key=key).values_list("pk", flat=True)
        )
    if not rooms:
        return []
    rows = (
        Member.objects.filter(room_id__in=rooms)
        .order_by("room__label", "user__last_name", "pk")
        .values_list("pk", "room__label")[:limit]
    )
    return [(pk, _("room {}").format(label)) for pk, label in rows]


def _members_in_order(
    actor: User, found: Found, limit: int, *, by_user: bool = False
) -> list[Member]:
    """The members found (by member id, or by login id with `by_user`), in that order, each
    once with its first match as `search_match`, in one query. Only the columns a result row
    shows are loaded: building ~25 full member, login, room and address objects cost more than
    the indexed lookups that found them."""
    matches: dict[int, str] = {}
    for pk, match in found:
        matches.setdefault(pk, match)
    ids = list(matches)[:limit]
    if not ids:
        return []
    rows = (
        Member.objects.visible_to(actor)
        .select_related("user", "room", "public_ipv4")
        .only(*SEARCH_RESULT_FIELDS)
        .order_by()
    )
    if by_user:
        by_key = {m.user_id: m for m in rows.filter(user_id__in=ids)}
    else:
        by_key = {m.pk: m for m in rows.filter(pk__in=ids)}
    result = []
    for key in ids:
        if key in by_key:
            by_key[key].search_match = matches[key]
            result.append(by_key[key])
    return result


def _text_found(*, query: str, limit: int) -> Found:
    """Logins (ids) of members whose names, e-mail or login match every word, best first,
    with which of those matched."""
    found: Found = []
    words = [w.lower() for w in query.split()]
    for uid, first, last, email, username in name_search_rows(query=query, limit=limit):
        if all(w in f"{first} {last}".lower() for w in words):
            what = _("name")
        elif all(w in email.lower() for w in words):
            what = _("e-mail address")
        elif all(w in username.lower() for w in words):
            what = _("login")
        else:
            what = _("name and e-mail address")
        found.append((uid, what))
    return found


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


def member_history(*, member: Member) -> dict[str, Any]:
    """Status changes and room stays of a member, newest first."""
    return {
        "status_changes": member.status_changes.select_related("actor")[:50],
        "room_stays": member.room_stays.select_related("room")[:50],
    }


def room_by_label(*, label: str) -> Room | None:
    """The room written as at the desk: A-101, case-insensitive, and in the notations the
    search takes ("a101", "A 101") when they name one room only."""
    text = label.strip()
    rooms = Room.objects.select_related("building")
    room = rooms.filter(label__iexact=text).first()
    key = _room_key(text)
    if room is None and len(key) >= 2 and any(c.isdigit() for c in key):
        found = list(rooms.annotate(key=_room_key_sql()).filter(key=key)[:2])
        room = found[0] if len(found) == 1 else None
    return room


def room_occupants(*, room: Room, exclude: Member | None = None) -> list[Member]:
    """The members who live in `room` (every status but ended), but `exclude`."""
    members = (
        Member.objects.filter(room=room)
        .exclude(status=MemberStatus.ENDED)
        .select_related("user")
        .order_by("pk")
    )
    if exclude is not None:
        members = members.exclude(pk=exclude.pk)
    return list(members[:10])


def rooms_free(*, building_id: int, limit: int = 8) -> list[str]:
    """Labels of the first rooms of a building where nobody lives (the move form offers them)."""
    taken = Member.objects.exclude(status=MemberStatus.ENDED).filter(room__isnull=False)
    return list(
        Room.objects.filter(building_id=building_id)
        .exclude(pk__in=taken.values("room_id"))
        .order_by("number", "pk")
        .values_list("label", flat=True)[:limit]
    )


# Kept for callers from the foundation; the office-hours search is member_search now.
person_search = member_search


def cause_members(causes: Iterable[str]) -> dict[int, Member]:
    """The members that `member.*` causes of rule-set versions mention, in one query (for a page
    of versions)."""
    pks = {
        int(m["pk"])
        for cause in causes
        for m in re.finditer(r"(?P<action>member\.[a-z_]+) (?P<pk>\d+)", cause)
    }
    if not pks:
        return {}
    return {m.pk: m for m in Member.objects.filter(pk__in=pks).select_related("user")}
