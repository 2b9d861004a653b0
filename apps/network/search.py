"""The network side of the office-hours search (members.selectors.member_search): members
found by a device's MAC or address, or by their public IPv4. Registered with the member search
through apps/network/extension.py; each lookup uses a narrow index (members migration 0005)."""

from __future__ import annotations

import ipaddress
import re

from django.db.models import CharField, F, Func, Q, QuerySet, TextField, Value
from django.db.models.functions import Cast, Collate, Lower
from django.utils.translation import gettext as _

from apps.core.mac import mac_fragment, mac_parse
from apps.members.extensions import Found
from apps.network.models import Device, PublicAddress


def member_search_found(*, kind: str, query: str, limit: int) -> Found:
    """(member id, what matched) for a MAC, an IPv4/IPv6 address, the start of an IPv4 address
    or part of a MAC (`kind` as members.selectors.search_kind says); [] for anything else."""
    if kind == "mac":
        return _devices_found(Device.objects.filter(mac=mac_parse(query)), _("MAC of device {}"))
    if kind in ("ipv4", "ipv6"):
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
        return found
    if kind == "ipv4-part":
        return _ipv4_start_found(query, limit)
    if kind == "mac-part":
        return _mac_part_found(mac_fragment(query), limit, query=query)
    if kind == "ipv6-suffix":
        return _ipv6_suffix_found(query, limit)
    if kind == "device-name":
        return _device_name_found(query, limit)
    return []


# The last groups of an IPv6 address as typed: "::1a2b", "fedd:eeff", "ccff:fedd:eeff".
IPV6_SUFFIX = re.compile(r"^[0-9a-f]{1,4}(:[0-9a-f]{1,4}){0,6}$")


def _ipv6_suffix_found(query: str, limit: int) -> Found:
    """Devices whose IPv6 address ends with these groups (an interface identifier, "::1a2b"):
    the reversed address text starts with them reversed, so the btree of network migration
    0010 answers it as a prefix."""
    suffix = query.strip().strip("[]").lower().lstrip(":")
    if not IPV6_SUFFIX.match(suffix):
        return []
    devices = (
        Device.objects.filter(ipv6__isnull=False)
        .annotate(rev=_ipv6_reversed_sql())
        .filter(rev__startswith=(":" + suffix)[::-1])
        .order_by("rev")
        .values_list("member_id", "name", "ipv6")[: limit * ROWS_PER_MEMBER]
    )
    found = [(pk, _("IPv6 of device {}").format(name) + f" ({ip})") for pk, name, ip in devices]
    return _distinct_members(found, limit)


def _ipv6_reversed_sql() -> Collate:
    # The expression of the index network_device_ipv6_rev_c (network migration 0010).
    return Collate(
        Func(
            Func(F("ipv6"), function="HOST", output_field=CharField()),
            function="REVERSE",
            output_field=CharField(),
        ),
        "C",
    )


def _device_name_found(query: str, limit: int) -> Found:
    """Devices whose name starts with what was typed ("phone", "tv liv"), then those whose name
    holds the words ("living", "room tv"; a word of two letters at the start of a word)."""
    words = [w for w in query.lower().split() if len(w) >= 2][:4]
    if not words:
        return []
    wanted = limit * ROWS_PER_MEMBER
    # The start of the name: an ordered walk of the btree on the lower-case name (network
    # migration 0012) that stops at the rows wanted, so a common name ("phone": an eighth of
    # all devices in the demo data) costs what a rare one costs.
    rows = list(
        Device.objects.annotate(lname=_lower_name_sql())
        .filter(lname__startswith=" ".join(words))
        .order_by("lname")
        .values_list("name", "pk", "member_id")[:wanted]
    )
    found = _distinct_members(
        [(pk, _("name of device {}").format(name)) for name, _pk, pk in rows], limit
    )
    if len(found) >= limit:
        return found
    # Then the words anywhere in the name (trigram index on the lower-case name, network
    # migration 0010). Two letters make no trigram of their own, and a LIKE '%tv%' would have
    # the index return every device to be checked again (120 ms at 100,000 members): a word
    # of two letters matches the start of a word of the name instead ("tv" finds "Living room
    # TV"), whose trigrams ("  t", " tv") the index has.
    devices = Device.objects.annotate(lname=Lower("name")).exclude(pk__in=[r[1] for r in rows])
    for word in words:
        if len(word) >= 3:
            devices = devices.filter(lname__contains=word)
        else:
            devices = devices.filter(Q(lname__startswith=word) | Q(lname__contains=" " + word))
    more = sorted(
        devices.values_list("name", "pk", "member_id")[: wanted - len(rows)],
        key=lambda row: (row[0].lower(), row[1]),
    )
    return _distinct_members(
        found + [(pk, _("name of device {}").format(name)) for name, _pk, pk in more], limit
    )


def _lower_name_sql() -> Collate:
    # The expression of the index network_device_name_lower_c (network migration 0012).
    return Collate(Lower("name"), "C")


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


# A member has several devices: device rows are read this many times over the number of
# members wanted, so that `limit` distinct members (and whether there are more) come back.
ROWS_PER_MEMBER = 8


def _distinct_members(found: Found, limit: int) -> Found:
    """The first match of each member, up to `limit` members (rows arrive in display order)."""
    seen: set[int] = set()
    result: Found = []
    for pk, match in found:
        if pk not in seen:
            seen.add(pk)
            result.append((pk, match))
            if len(result) >= limit:
                break
    return result


def _devices_found(devices: QuerySet[Device], label: str) -> Found:
    """(member id, label with the device's name) for each device."""
    return [(pk, label.format(name)) for pk, name in devices.values_list("member_id", "name")]


def _ipv4_start_found(query: str, limit: int) -> Found:
    """Devices and public addresses whose IPv4 starts with `query`, in address order."""
    devices = (
        Device.objects.annotate(host=_host_sql("ipv4"))
        .filter(host__startswith=query)
        .order_by("host")
        .values_list("member_id", "name", "host")[: limit * ROWS_PER_MEMBER]
    )
    found = [(pk, _("IPv4 of device {}").format(name) + f" ({host})") for pk, name, host in devices]
    found = _distinct_members(found, limit)
    publics = (
        PublicAddress.objects.filter(member__isnull=False)
        .annotate(host=_host_sql("address"))
        .filter(host__startswith=query)
        .order_by("host")
        .values_list("member_id", "host")[:limit]
    )
    return found + [(pk, _("public IPv4") + f" ({host})") for pk, host in publics]


def _mac_part_found(digits: str, limit: int, *, query: str = "") -> Found:
    """Devices whose MAC starts with these hex digits (a vendor prefix: "aabb.cc"), then those
    whose MAC holds them anywhere (trigram index on the MAC's hex digits); typed with
    separators ("06:6f:00"), only whole bytes in that place count."""
    if not digits:
        return []
    wanted = limit * ROWS_PER_MEMBER
    # The start: a range of the MAC's own unique btree, walked in order and stopped at the
    # rows wanted; a vendor prefix is shared by many devices and costs no more than a rare one.
    first = _mac_join(digits.ljust(12, "0"))
    last = _mac_join(digits.ljust(12, "f"))
    rows = list(
        Device.objects.filter(mac__gte=first, mac__lte=last)
        .annotate(mac_text=Cast("mac", TextField()))
        .filter(**_mac_bytes_filter(query))
        .order_by("mac")
        .values_list("mac", "member_id", "name", "pk")[:wanted]
    )
    found = _distinct_members(_mac_rows(rows), limit)
    if len(found) >= limit:
        return found
    # Anywhere: no ORDER BY in SQL: with one, the planner walks the whole MAC index in order
    # hoping to meet 25 matches early (100 ms for a rare fragment at 100,000 members); the
    # trigram bitmap finds them all at once, and a fragment of four digits or more matches few.
    more = sorted(
        Device.objects.annotate(hex=_mac_hex_sql(), mac_text=Cast("mac", TextField()))
        .filter(hex__contains=digits, **_mac_bytes_filter(query))
        .exclude(pk__in=[row[3] for row in rows])
        .values_list("mac", "member_id", "name", "pk")[: wanted - len(rows)],
        key=lambda row: str(row[0]),
    )
    return _distinct_members(found + _mac_rows(more), limit)


def _mac_join(hex12: str) -> str:
    return ":".join(hex12[i : i + 2] for i in range(0, 12, 2))


def _mac_rows(rows: list[tuple[str, int, str, int]]) -> Found:
    return [(pk, _("MAC of device {}").format(name) + f" ({mac})") for mac, pk, name, _id in rows]


def _mac_bytes_filter(query: str) -> dict[str, str]:
    """With separators, the MAC's text must hold the bytes as typed ("06:6f:00", "06-6f-00")."""
    if not re.search(r"[:\-]", query):
        return {}
    return {"mac_text__contains": re.sub(r"-", ":", query.strip(":-")).lower()}
