"""Reads for the members app: the office-hours search, the check-in queue, member pages."""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Any

from django.db.models import (
    CharField,
    F,
    Func,
    Q,
    QuerySet,
    TextField,
    Value,
)
from django.db.models.functions import Cast, Collate, Lower
from django.utils.translation import gettext as _

from apps.accounts.roles import STAFF_ROLES, has_role
from apps.members.choices import MemberStatus
from apps.members.models import Member, Room
from apps.members.namesearch import name_search_rows
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


def _mac_fragment(query: str) -> str:
    """The hex digits of what may be part of a MAC ("ee:ff", "ddeeff", "cafe"), or ""."""
    digits = re.sub(r"[:\-]", "", query).lower()
    return digits if 4 <= len(digits) <= 11 and re.fullmatch(r"[0-9a-f]+", digits) else ""


def _room_key(text: str) -> str:
    """A room label as typed at the desk: "a101", "A 101" and "A-101" are one key."""
    return re.sub(r"[^0-9a-z]", "", text.lower())


def _room_key_sql() -> Func:
    # The expression of the index members_room_label_compact (members migration 0005): keep them equal.
    return Func(
        Lower("label"), Value("[^0-9a-z]"), Value(""), Value("g"), function="REGEXP_REPLACE"
    )


def _host_sql(field: str) -> Collate:
    # The expression of the indexes network_*_host_c (members migration 0005): text of the
    # address in the C collation, so that a prefix LIKE and ORDER BY both use the btree.
    return Collate(Func(F(field), function="HOST", output_field=CharField()), "C")


def _mac_hex_sql() -> Func:
    # The expression of the trigram index network_device_mac_hex_trgm (members migration 0005).
    return Func(
        Cast("mac", output_field=TextField()),
        Value(":"),
        Value(""),
        function="REPLACE",
        output_field=TextField(),
    )


Found = list[tuple[int, str]]  # (member id, what matched), best first


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
    if kind == "mac":
        found = _devices_found(Device.objects.filter(mac=mac_parse(query)), _("MAC of device {}"))
    elif kind in ("ipv4", "ipv6"):
        address = str(ipaddress.ip_address(query.strip("[]")))
        field = "ipv4" if kind == "ipv4" else "ipv6"
        label = _("IPv4 of device {}") if kind == "ipv4" else _("IPv6 of device {}")
        found = _devices_found(Device.objects.filter(**{field: address}), label)
        if kind == "ipv4":
            found += [
                (pk, _("public IPv4"))
                for pk in PublicAddress.objects.filter(
                    address=address, member__isnull=False
                ).values_list("member_id", flat=True)
            ]
        elif not found:
            # Any other address of a room's /64 (privacy addresses): whoever lives there.
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
    elif kind == "ipv4-part":
        found = _ipv4_start_found(query, limit)
    elif kind == "mac-part":
        # "ab1012" may be room AB-1012 as well: a room first, as for any word.
        found = _room_found(query, limit) or _mac_part_found(
            _mac_fragment(query), limit, query=query
        )
    else:
        found = _room_found(query, limit)
        if not found:
            people = _members_in_order(
                actor, _text_found(query=query, limit=limit), limit, by_user=True
            )
            digits = _mac_fragment(query)
            if not digits or len(people) >= limit:
                return people
            # "cafe", "beef": a word and a MAC fragment; the people first.
            found = [(m.pk, m.search_match) for m in people]
            found += _mac_part_found(digits, limit - len(people))
    return _members_in_order(actor, found, limit)


def _devices_found(devices: QuerySet[Device], label: str) -> Found:
    """(member id, label with the device's name) for each device."""
    return [(pk, label.format(name)) for pk, name in devices.values_list("member_id", "name")]


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


def _ipv4_start_found(query: str, limit: int) -> Found:
    """Devices and public addresses whose IPv4 starts with `query`, in address order."""
    devices = (
        Device.objects.annotate(host=_host_sql("ipv4"))
        .filter(host__startswith=query)
        .order_by("host")
        .values_list("member_id", "name", "host")[:limit]
    )
    found = [(pk, _("IPv4 of device {}").format(name) + f" ({host})") for pk, name, host in devices]
    publics = (
        PublicAddress.objects.filter(member__isnull=False)
        .annotate(host=_host_sql("address"))
        .filter(host__startswith=query)
        .order_by("host")
        .values_list("member_id", "host")[:limit]
    )
    return found + [(pk, _("public IPv4") + f" ({host})") for pk, host in publics]


def _mac_part_found(digits: str, limit: int, *, query: str = "") -> Found:
    """Devices whose MAC contains these hex digits (trigram index on the MAC's hex digits);
    typed with separators ("06:6f:00"), only whole bytes in that place count."""
    # No ORDER BY in SQL: with one, the planner walks the whole MAC index in order hoping to
    # meet 25 matches early (100 ms for a rare fragment at 100,000 members); the trigram
    # bitmap finds them all at once, and a fragment of four digits or more matches few.
    devices = sorted(
        Device.objects.annotate(hex=_mac_hex_sql(), mac_text=Cast("mac", TextField()))
        .filter(hex__contains=digits, **_mac_bytes_filter(query))
        .values_list("mac", "member_id", "name")[: limit * 4],
        key=lambda row: str(row[0]),
    )[:limit]
    return [(pk, _("MAC of device {}").format(name) + f" ({mac})") for mac, pk, name in devices]


def _mac_bytes_filter(query: str) -> dict[str, str]:
    """With separators, the MAC's text must hold the bytes as typed ("06:6f:00", "06-6f-00")."""
    if not re.search(r"[:\-]", query):
        return {}
    return {"mac_text__contains": re.sub(r"-", ":", query.strip(":-")).lower()}


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
