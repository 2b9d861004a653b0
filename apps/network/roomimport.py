"""Buildings and rooms from a CSV file: every line checked before anything is written.

Two steps. `rooms_csv_parse` turns the file's bytes into typed rows or refuses with one line that
names the file's line: no header, unknown or missing columns, a wrong number of fields, text that
is not UTF-8, binary data, fields longer than the database holds, networks that are none, an IPv6
prefix in the IPv4 column (swapped columns), a building given two different subnets. Then
`rooms_import` writes them in one transaction, in bulk (100,000 rooms in seconds, not one query
per room), and still refuses with the line when the database disagrees (an overlapping subnet, a
label taken). Rooms that exist already are left alone, so importing a file again changes nothing.
"""

from __future__ import annotations

import csv
import io
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.contrib.contenttypes.models import ContentType
from django.db import connection, transaction
from django.utils.translation import gettext as _

from apps.audit.models import AuditEntry
from apps.members.models import Building, Room
from apps.network.errors import NetworkError
from apps.network.models import Family, Subnet
from apps.network.services import subnet_create

if TYPE_CHECKING:
    from django.contrib.auth.models import User

__all__ = [
    "IMPORT_COLUMNS",
    "ImportError_",
    "RoomRow",
    "import_summary",
    "rooms_csv_parse",
    "rooms_import",
]

IMPORT_COLUMNS = ("building", "building_name", "room", "ipv4_subnet", "ipv6_prefix")
REQUIRED = ("building", "room")
# The longest line a room file needs is far below this; anything longer is not a room file.
MAX_LINE_BYTES = 4096
BATCH = 20000


class ImportError_(NetworkError):
    """A CSV line that cannot be imported; nothing of the file was imported."""


@dataclass(frozen=True, slots=True)
class RoomRow:
    """One checked line of the file."""

    line: int
    building: str
    building_name: str
    room: str
    ipv4: ipaddress.IPv4Network | None
    ipv6: ipaddress.IPv6Network | None


def _refuse(line: int, message: str) -> ImportError_:
    return ImportError_(_("Line %(line)d: %(error)s") % {"line": line, "error": message})


def _text(data: bytes) -> str:
    """The file as text, or a refusal naming the first line that is binary or not UTF-8."""
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise _refuse(line, _("binary data (a NUL byte): this is not a CSV text file."))
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise _refuse(
            line,
            _("byte 0x%(byte)02x is not UTF-8 text; save the file as UTF-8 (CSV UTF-8).")
            % {"byte": data[exc.start]},
        ) from None


def _lines(text: str) -> Iterator[str]:
    for number, line in enumerate(io.StringIO(text, newline=""), start=1):
        if len(line.encode()) > MAX_LINE_BYTES:
            raise _refuse(
                number,
                _("the line is longer than %(max)d bytes: this is not a room list.")
                % {"max": MAX_LINE_BYTES},
            )
        yield line


def _header(fields: list[str] | None) -> list[str]:
    if not fields or not any(f.strip() for f in fields):
        raise _refuse(1, _("the file is empty: the first line must name the columns."))
    names = [f.strip().lower() for f in fields]
    unknown = [n for n in names if n not in IMPORT_COLUMNS]
    if unknown and not set(REQUIRED) & set(names):
        raise _refuse(
            1,
            _("no header: the first line must name the columns (%(columns)s).")
            % {"columns": ", ".join(IMPORT_COLUMNS)},
        )
    if unknown:
        raise _refuse(
            1,
            _("unknown column “%(column)s”; the columns are %(columns)s.")
            % {"column": unknown[0][:40], "columns": ", ".join(IMPORT_COLUMNS)},
        )
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise _refuse(1, _("the column “%(column)s” is missing.") % {"column": missing[0]})
    if len(set(names)) != len(names):
        raise _refuse(1, _("a column is named twice."))
    return names


def _network(line: int, column: str, value: str, version: int) -> Any:
    if not value:
        return None
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise _refuse(
            line,
            _("%(column)s “%(value)s” is not a network: %(error)s")
            % {"column": column, "value": value[:60], "error": exc},
        ) from None
    if net.version != version:
        other = "ipv6_prefix" if column == "ipv4_subnet" else "ipv4_subnet"
        raise _refuse(
            line,
            _(
                "%(column)s holds the IPv%(version)d network %(net)s: are %(column)s and %(other)s swapped?"
            )
            % {"column": column, "version": net.version, "net": net, "other": other},
        )
    return net


def _checked(line: int, values: dict[str, str]) -> RoomRow:
    limits = {
        "building": Building._meta.get_field("code").max_length,
        "building_name": Building._meta.get_field("name").max_length,
        "room": Room._meta.get_field("number").max_length,
    }
    for column, limit in limits.items():
        if len(values.get(column, "")) > limit:
            raise _refuse(
                line,
                _("%(column)s is longer than %(max)d characters.")
                % {"column": column, "max": limit},
            )
    code, number = values.get("building", ""), values.get("room", "")
    if not code or not number:
        raise _refuse(line, _("the columns “building” and “room” must not be empty."))
    return RoomRow(
        line=line,
        building=code,
        building_name=values.get("building_name", "") or code,
        room=number,
        ipv4=_network(line, "ipv4_subnet", values.get("ipv4_subnet", ""), 4),
        ipv6=_network(line, "ipv6_prefix", values.get("ipv6_prefix", ""), 6),
    )


def rooms_csv_parse(data: bytes) -> list[RoomRow]:
    """Every line of the file as a typed row, or ImportError_ naming the first bad line."""
    reader = csv.reader(_lines(_text(data)))
    try:
        names = _header(next(reader, None))
        rows: list[RoomRow] = []
        subnets: dict[tuple[str, int], tuple[Any, int]] = {}
        for fields in reader:
            line = reader.line_num
            if not any(f.strip() for f in fields):
                continue  # a blank line
            if len(fields) != len(names):
                raise _refuse(
                    line,
                    _("%(count)d fields, but the header names %(columns)d columns.")
                    % {"count": len(fields), "columns": len(names)},
                )
            row = _checked(line, dict(zip(names, (f.strip() for f in fields), strict=True)))
            for net in (row.ipv4, row.ipv6):
                if net is None:
                    continue
                first, first_line = subnets.setdefault((row.building, net.version), (net, line))
                if first != net:
                    raise _refuse(
                        line,
                        _("building %(building)s has the network %(net)s on line %(first)d.")
                        % {"building": row.building, "net": first, "first": first_line},
                    )
            rows.append(row)
    except csv.Error as exc:
        raise _refuse(reader.line_num, str(exc)) from None
    return rows


# --- writing ----------------------------------------------------------------------------------


def _audit_rows(
    actor: User | None, action: str, objects: list[Any], changes: Any
) -> list[AuditEntry]:
    is_user = getattr(actor, "is_authenticated", False)
    kind = ContentType.objects.get_for_model(type(objects[0])) if objects else None
    return [
        AuditEntry(
            actor=actor if is_user else None,
            actor_name=actor.get_username() if is_user else "system",
            action=action,
            content_type=kind,
            object_id=str(obj.pk),
            object_repr=str(obj)[:200],
            changes=changes(obj),
        )
        for obj in objects
    ]


def _buildings(
    rows: list[RoomRow], actor: User | None, counts: dict[str, int]
) -> dict[str, Building]:
    buildings = {b.code: b for b in Building.objects.all()}
    new: dict[str, Building] = {}
    for row in rows:
        if row.building not in buildings and row.building not in new:
            new[row.building] = Building(code=row.building, name=row.building_name)
    created = Building.objects.bulk_create(new.values())
    AuditEntry.objects.bulk_create(
        _audit_rows(
            actor,
            "building.create",
            created,
            lambda b: {"code": [None, b.code], "name": [None, b.name]},
        )
    )
    counts["buildings"] = len(created)
    return {**buildings, **{b.code: b for b in created}}


def _subnets(
    rows: list[RoomRow], buildings: dict[str, Building], actor: User | None, counts: dict[str, int]
) -> None:
    existing = {(s.building_id, s.family): s.network for s in Subnet.objects.all()}
    for row in rows:
        building = buildings[row.building]
        for net in (row.ipv4, row.ipv6):
            if net is None or existing.get((building.pk, net.version)) == str(net):
                continue
            try:
                subnet_create(building=building, network=str(net), actor=actor)
            except NetworkError as exc:
                raise _refuse(row.line, exc.message) from None
            existing[(building.pk, net.version)] = str(net)
            counts["subnets"] += 1


def _free_prefixes(building: Building) -> Iterator[str] | None:
    """The building's free /64s in order (index 0 stays with the building), or None."""
    subnet = Subnet.objects.filter(building=building, family=Family.IPV6).first()
    if subnet is None:
        return None
    used = set(
        Room.objects.filter(building=building, ipv6_prefix__isnull=False).values_list(
            "ipv6_prefix", flat=True
        )
    )
    prefixes = ipaddress.IPv6Network(subnet.network).subnets(new_prefix=64)
    next(prefixes)
    return (str(net) for net in prefixes if str(net) not in used)


def _rooms(
    rows: list[RoomRow], buildings: dict[str, Building], actor: User | None, counts: dict[str, int]
) -> None:
    existing = set(Room.objects.values_list("building_id", "number"))
    labels = set(Room.objects.values_list("label", flat=True))
    free: dict[int, Iterator[str] | None] = {}
    new: list[Room] = []
    for row in rows:
        building = buildings[row.building]
        if (building.pk, row.room) in existing:
            counts["unchanged"] += 1
            continue
        label = Room.make_label(building.code, row.room)
        if label in labels:
            raise _refuse(row.line, _("the room label %(label)s is taken.") % {"label": label})
        if building.pk not in free:
            free[building.pk] = _free_prefixes(building)
        prefixes = free[building.pk]
        prefix = None
        if prefixes is not None:
            prefix = next(prefixes, None)
            if prefix is None:
                raise _refuse(
                    row.line,
                    _("the IPv6 prefix of %(building)s has no free /64 left.")
                    % {"building": building.code},
                )
        existing.add((building.pk, row.room))
        labels.add(label)
        new.append(Room(building=building, number=row.room, label=label, ipv6_prefix=prefix))
    _rooms_insert(new, actor)
    counts["rooms"] = len(new)


# One statement per batch inserts the rooms and their audit rows ("room.create", as room_create
# writes them): the ORM's bulk_create spent a minute building and compiling 200,000 objects.
_INSERT = """
WITH new AS (
    INSERT INTO {room} (building_id, number, label, ipv6_prefix)
    SELECT * FROM unnest(%s::bigint[], %s::varchar[], %s::varchar[], %s::cidr[])
    RETURNING id, label, ipv6_prefix
)
INSERT INTO {audit} (at, actor_id, actor_name, action, content_type_id, object_id, object_repr,
                     changes)
SELECT now(), %s, %s, 'room.create', %s, new.id::text, new.label,
       jsonb_build_object('label', jsonb_build_array(NULL, new.label),
                          'ipv6_prefix', jsonb_build_array(NULL, new.ipv6_prefix::text))
FROM new
"""


def _rooms_insert(rooms: list[Room], actor: User | None) -> None:
    is_user = getattr(actor, "is_authenticated", False)
    sql = _INSERT.format(room=Room._meta.db_table, audit=AuditEntry._meta.db_table)
    kind = ContentType.objects.get_for_model(Room).pk
    with connection.cursor() as cursor:
        for start in range(0, len(rooms), BATCH):
            batch = rooms[start : start + BATCH]
            cursor.execute(
                sql,
                [
                    [r.building_id for r in batch],
                    [r.number for r in batch],
                    [r.label for r in batch],
                    [r.ipv6_prefix for r in batch],
                    actor.pk if is_user else None,
                    actor.get_username() if is_user else "system",
                    kind,
                ],
            )


@transaction.atomic
def rooms_import(*, data: bytes, actor: User | None) -> dict[str, int]:
    """Buildings, subnets and rooms from a CSV file's bytes; all or nothing (ImportError_ names
    the line). Counts of what was created are returned."""
    rows = rooms_csv_parse(data)
    counts = {"buildings": 0, "rooms": 0, "subnets": 0, "unchanged": 0}
    buildings = _buildings(rows, actor, counts)
    _subnets(rows, buildings, actor, counts)
    _rooms(rows, buildings, actor, counts)
    return counts


def import_summary(counts: dict[str, int]) -> str:
    """What an import did, in one sentence (the admin's message, the command's output)."""
    return (
        _(
            "Imported: %(buildings)d buildings, %(rooms)d rooms, %(subnets)d subnets; "
            "%(unchanged)d rooms existed already."
        )
        % counts
    )
