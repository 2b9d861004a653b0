"""The demo data's building blocks for `manage.py seed_demo`: the room layout, the members with
their devices and addresses (NetworkSeeder), their forwards, openings and shaping (RulesSeeder),
all written with COPY (copy_insert). Deterministic: the same seed gives the same rows."""

from __future__ import annotations

import datetime as dt
import ipaddress
import random
import string
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.db import connection
from django.db.models import Model, Q
from django.db.models.fields import AutoFieldMixin
from django.utils import timezone

from apps.core.mac import eui64_interface_id
from apps.dhcp.models import DhcpSettings, RegistrationRange
from apps.firewall.models import FirewallHost, Site
from apps.members.choices import HOLDS_PUBLIC_IPV4, MemberStatus
from apps.members.models import Building, Member, Room, RoomStay, StatusChange
from apps.network.models import (
    Device,
    Family,
    Ipv6Opening,
    ManagementNetwork,
    PortForward,
    PublicAddress,
    PublicPool,
    ShapingProfile,
    Subnet,
)
from apps.testaccess.models import TestAccess


def copy_insert(model: type[Model], fields: list[str], rows: Iterable[Sequence[Any]]) -> None:
    """Insert `rows` (values of `fields`, by attname) into the model's table with one COPY.

    Columns left out get their field's default once (auto_now fields the time of the call), so
    a row costs a tuple instead of a model instance and Django's per-field preparation, which
    is most of bulk_create's time at 100,000 members. The statement triggers still fire.
    """
    opts = model._meta
    now = timezone.now()
    columns = [opts.get_field(name).column for name in fields]
    extra: list[Any] = []
    for field in opts.concrete_fields:
        if field.attname in fields or field.column in columns:
            continue
        if isinstance(field, AutoFieldMixin):
            continue
        if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            value = now
        elif field.has_default():
            value = field.get_db_prep_save(field.get_default(), connection)
        elif field.null:
            value = None
        elif field.blank and field.empty_strings_allowed:
            value = ""
        else:
            raise CommandError(f"copy_insert: {opts.label}.{field.name} needs a value.")
        columns.append(field.column)
        extra.append(value)
    tail = tuple(extra)
    with connection.cursor() as cursor:
        sql = f"COPY {opts.db_table} ({', '.join(columns)}) FROM STDIN"
        with cursor.cursor.copy(sql) as copy:
            for row in rows:
                copy.write_row((*row, *tail))


# Membership statuses by share (cumulative weights), and devices per non-ended member
# (mean 10/3, so that with 10 % ended members there are 3 devices per member on average).
# A quarter on test access: 5,000 shaped members at 20,000 (the design target).
STATUS_WEIGHTS = [
    (MemberStatus.ACTIVE, 52),
    (MemberStatus.PENDING, 8),
    (MemberStatus.TEST, 25),
    (MemberStatus.SUSPENDED, 5),
    (MemberStatus.ENDED, 10),
]
DEVICE_COUNTS = [1, 2, 3, 4, 5, 5]
MAX_SITES = 100
DEVICE_NAMES = ["laptop", "phone", "tablet", "desktop", "console", "tv", "printer", "watch"]
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


class Plan(NamedTuple):
    """One new membership: what its rows are made of (drawn from the member's own generator)."""

    username: str
    n: int
    user_id: int
    status: str
    registered: dt.datetime
    checked_in: dt.datetime | None
    ended: dt.datetime | None
    room: Room
    devices: int
    rng: random.Random


class Layout:
    """Address ranges and building sizes for a demo of a given size."""

    def __init__(
        self, *, rooms_per_building: int, pool: str, large: bool, huge: bool = False
    ) -> None:
        self.rooms_per_building = rooms_per_building
        self.pool = pool
        self.large = large
        self.huge = huge

    @classmethod
    def for_count(cls, members: int) -> Layout:
        if members <= 200:
            return cls(rooms_per_building=40, pool="198.51.100.0/24", large=False)
        if members <= 250 * 250:
            return cls(rooms_per_building=250, pool="198.18.0.0/15", large=True)
        if members > 250 * 500:
            raise CommandError("--members: at most 125,000 (250 buildings of 500 rooms).")
        # A /56 per building has room for 255 rooms only: a /48 per building instead.
        return cls(rooms_per_building=500, pool="198.18.0.0/15", large=True, huge=True)

    def ipv4_subnet(self, b: int) -> str:
        return f"10.{b}.0.0/16" if self.large else f"10.100.{b}.0/24"

    def ipv6_prefix(self, b: int) -> str:
        if self.huge:
            return f"2001:db8:{0x200 + b:x}::/48"
        return f"2001:db8:100:{b:02x}00::/56"

    def room_prefix(self, b: int, index: int) -> str:
        if self.huge:
            return f"2001:db8:{0x200 + b:x}:{index:x}::/64"
        return f"2001:db8:100:{b:02x}{index:02x}::/64"


def building_code(b: int) -> str:
    """A, B, ..., Z, AA, AB, ..."""
    letters = string.ascii_uppercase
    code = ""
    while b > 0:
        b, rest = divmod(b - 1, 26)
        code = letters[rest] + code
    return code


def room_number(index: int) -> str:
    """Room index 1.. as floor and number: 101..120, 201..220, ..."""
    floor, number = divmod(index - 1, 20)
    return f"{floor + 1}{number + 1:02d}"


class NetworkSeeder:
    """Buildings, rooms, memberships, public addresses and devices in bulk (one query per kind)."""

    def dhcp_demo(self) -> None:
        dhcp_demo_apply(self)

    def __init__(self, *, layout: Layout, seed: int) -> None:
        self.layout = layout
        self.seed = seed
        self._prefixes: dict[int, int] = {}

    def prepare(self, members: int, *, sites: int = 0) -> None:
        pool, _created = PublicPool.objects.get_or_create(
            name="demo", defaults={"network": self.layout.pool}
        )
        if pool.network != self.layout.pool:
            raise CommandError(
                f"The demo pool is {pool.network}, but {members} members need {self.layout.pool}: "
                "the layout changes above 200 members; seed a fresh database."
            )
        self.pool = pool
        per = self.layout.rooms_per_building
        first = Room.objects.filter(building__code=building_code(1)).count()
        if first not in (0, per):
            raise CommandError(
                f"The demo buildings have {first} rooms, but {members} members need {per}: "
                "the layout changes above 62,500 members; seed a fresh database."
            )
        count = max(2, sites, -(-members // per))
        existing = {b.code: b for b in Building.objects.all()}
        new = [
            Building(code=building_code(b), name=f"House {building_code(b)}")
            for b in range(1, count + 1)
            if building_code(b) not in existing
        ]
        Building.objects.bulk_create(new)
        self.buildings = {
            b: Building.objects.get(code=building_code(b))
            if building_code(b) not in existing
            else existing[building_code(b)]
            for b in range(1, count + 1)
        }
        have = set(Subnet.objects.values_list("building_id", "family"))
        Subnet.objects.bulk_create(
            [
                Subnet(building=building, family=family, network=net)
                for b, building in self.buildings.items()
                for family, net in (
                    (Family.IPV4, self.layout.ipv4_subnet(b)),
                    (Family.IPV6, self.layout.ipv6_prefix(b)),
                )
                if (building.pk, family) not in have
            ]
        )
        labels = set(Room.objects.values_list("label", flat=True))
        rooms = []
        for b, building in self.buildings.items():
            for index in range(1, per + 1):
                label = Room.make_label(building.code, room_number(index))
                if label not in labels:
                    rooms.append(
                        (building.pk, room_number(index), label, self.layout.room_prefix(b, index))
                    )
        copy_insert(Room, ["building_id", "number", "label", "ipv6_prefix"], rooms)
        self.rooms = {r.label: r for r in Room.objects.only("building_id", "label", "ipv6_prefix")}

    def sites(self, count: int) -> list[Any]:
        """`count` firewall sites demo-1 .. demo-N over consecutive runs of the buildings (as even
        as the buildings allow), each with its pair of hosts demo-N-fw1/-fw2. The hosts are
        created disabled (documentation addresses, 192.0.2.0/24): nothing is pushed to them
        until an admin points them at real hosts. Idempotent; a site's buildings follow the
        current split."""
        ordered = [self.buildings[b] for b in sorted(self.buildings)]
        made = []
        for s in range(count):
            part = ordered[s * len(ordered) // count : (s + 1) * len(ordered) // count]
            site, _created = Site.objects.get_or_create(
                name=f"demo-{s + 1}",
                defaults={
                    # The large layout's building subnets are 10.<b>.0.0/16: one /8 holds them.
                    "member_network4": "10.0.0.0/8" if self.layout.large else "10.100.0.0/16",
                    "gateway4": "10.100.0.1",
                },
            )
            site.buildings.set(part)
            for h in (1, 2):
                FirewallHost.objects.get_or_create(
                    name=f"demo-{s + 1}-fw{h}",
                    defaults={
                        "address": f"192.0.2.{(2 * s + h) % 254 + 1}",
                        "site": site,
                        "enabled": False,
                        "rollout_order": h,
                    },
                )
            made.append(site)
        return made

    def _room_for(self, n: int) -> Room:
        per = self.layout.rooms_per_building
        b, index = divmod(n - 1, per)
        return self.rooms[Room.make_label(building_code(b + 1), room_number(index + 1))]

    def memberships(self, people: list[tuple[str, int]]) -> dict[str, int]:
        """Member rows (and everything hanging off them) for the logins that have none yet."""
        user_model = get_user_model()
        ids = dict(
            user_model.objects.filter(
                Q(username="resident") | Q(username__regex=r"^member[0-9]+$"),
                member__isnull=True,
            ).values_list("username", "id")
        )
        todo = [(u, n) for u, n in people if u in ids]
        if not todo:
            return {"members": 0, "devices": 0}
        now = timezone.now()
        plans = []
        for username, n in todo:
            rng = random.Random(f"{self.seed}:{username}:net")  # noqa: S311 - demo data
            status = MemberStatus.ACTIVE if username == "resident" else self._status(rng)
            registered = EPOCH + dt.timedelta(days=rng.randrange(0, 300), minutes=n % 1440)
            devices = (
                2
                if username == "resident"
                else (0 if status == MemberStatus.ENDED else rng.choice(DEVICE_COUNTS))
            )
            ended = status == MemberStatus.ENDED
            plans.append(
                Plan(
                    username=username,
                    n=n,
                    user_id=ids[username],
                    status=status,
                    registered=registered,
                    checked_in=None if status == MemberStatus.PENDING else registered + DAY,
                    ended=registered + 2 * DAY if ended else None,
                    room=self._room_for(n),
                    devices=devices,
                    rng=rng,
                )
            )
        copy_insert(
            Member,
            [
                "user_id",
                "room_id",
                "status",
                "status_since",
                "registered_at",
                "checked_in_at",
                "test_access_until",
                "ended_at",
                "phone",
            ],
            (
                (
                    p.user_id,
                    None if p.ended else p.room.pk,
                    p.status,
                    _status_since(p),
                    p.registered,
                    p.checked_in,
                    (now + dt.timedelta(days=1 + p.n % 28)).date()
                    if p.status == MemberStatus.TEST
                    else None,
                    p.ended,
                    f"+49 30 {p.rng.randrange(1000000, 9999999)}",
                )
                for p in plans
            ),
        )
        wanted = {p.user_id for p in plans}
        member_ids = {
            user_id: pk
            for user_id, pk in Member.objects.values_list("user_id", "pk")
            if user_id in wanted
        }
        stays, changes = [], []
        for p in plans:
            member_id = member_ids[p.user_id]
            period = f"[{p.registered.isoformat()},{p.ended.isoformat() if p.ended else ''})"
            stays.append((member_id, p.room.pk, period))
            changes.append((member_id, "", "pending", p.registered))
            if p.status != MemberStatus.PENDING:
                changes.append((member_id, "pending", p.status, p.registered + 2 * DAY))
        copy_insert(RoomStay, ["member_id", "room_id", "period"], stays)
        copy_insert(StatusChange, ["member_id", "old_status", "new_status", "at"], changes)
        copy_insert(
            PublicAddress,
            ["pool_id", "address", "member_id", "assigned_at"],
            self._public(plans, member_ids),
        )
        devices = self._devices(plans, member_ids)
        copy_insert(Device, ["member_id", "name", "mac", "ipv4", "ipv6"], devices)
        return {"members": len(plans), "devices": len(devices)}

    @staticmethod
    def _status(rng: random.Random) -> str:
        pick = rng.randrange(100)
        for status, weight in STATUS_WEIGHTS:
            if pick < weight:
                return status
            pick -= weight
        return MemberStatus.ACTIVE

    def _public(
        self, plans: list[Plan], member_ids: dict[int, int]
    ) -> list[tuple[int, str, int, dt.datetime | None]]:
        network = ipaddress.IPv4Network(self.pool.network)
        used = {
            int(ipaddress.IPv4Address(a))
            for a in PublicAddress.objects.filter(pool=self.pool).values_list("address", flat=True)
        }
        candidate = int(network.network_address) + 1
        last = int(network.broadcast_address) - 1
        rows = []
        for p in plans:
            if p.status not in HOLDS_PUBLIC_IPV4:
                continue
            while candidate in used:
                candidate += 1
            if candidate > last:
                raise CommandError(f"The demo pool {network} is too small for this many members.")
            used.add(candidate)
            rows.append(
                (
                    self.pool.pk,
                    str(ipaddress.IPv4Address(candidate)),
                    member_ids[p.user_id],
                    p.checked_in,
                )
            )
        return rows

    def _ipv6(self, room: Room, mac: str) -> str | None:
        """device_ipv6(room=room, mac=mac), with the room's prefix parsed once per room."""
        if not room.ipv6_prefix:
            return None
        prefix = self._prefixes.get(room.pk)
        if prefix is None:
            prefix = int(ipaddress.IPv6Network(room.ipv6_prefix).network_address)
            self._prefixes[room.pk] = prefix
        return str(ipaddress.IPv6Address(prefix | eui64_interface_id(mac)))

    def _devices(
        self, plans: list[Plan], member_ids: dict[int, int]
    ) -> list[tuple[int, str, str, str, str | None]]:
        used: dict[int, set[int]] = {}
        next_free: dict[int, int] = {}
        rows = []
        for p in plans:
            if not p.devices:
                continue
            room, n = p.room, p.n
            b = room.building_id
            if b not in used:
                subnet = Subnet.objects.get(building_id=b, family=Family.IPV4)
                net = ipaddress.IPv4Network(subnet.network)
                used[b] = {
                    int(ipaddress.IPv4Address(a))
                    for a in Device.objects.filter(
                        ipv4__net_contained_or_equal=subnet.network
                    ).values_list("ipv4", flat=True)
                }
                next_free[b] = int(net.network_address) + 2
                used[b].add(int(net.broadcast_address))
            names = p.rng.sample(DEVICE_NAMES, p.devices)
            for j in range(p.devices):
                while next_free[b] in used[b]:
                    next_free[b] += 1
                address = next_free[b]
                used[b].add(address)
                mac = f"02:{self.seed & 255:02x}:{n >> 16 & 255:02x}:{n >> 8 & 255:02x}:{n & 255:02x}:{j:02x}"
                if n == 1 and p.username == "resident":
                    mac = f"06:{self.seed & 255:02x}:00:00:00:{j:02x}"
                rows.append(
                    (
                        member_ids[p.user_id],
                        names[j],
                        mac,
                        str(ipaddress.IPv4Address(address)),
                        self._ipv6(room, mac),
                    )
                )
        return rows


# Port forwards: 0-13 drawn, capped at 10 (mean about 6 per member with a public IPv4, so about
# 100,000 at 20,000 members); ports a member likes to forward, then random high ports.
POPULAR_PORTS = [
    (22, "tcp", "ssh"),
    (80, "tcp", "web"),
    (443, "tcp", "web"),
    (25565, "tcp", "minecraft"),
    (27015, "both", "game server"),
    (3074, "both", "xbox"),
    (32400, "tcp", "plex"),
    (51820, "udp", "wireguard"),
    (8080, "tcp", "dev server"),
    (6881, "both", "torrent"),
]
FORWARD_DRAW = 14
FORWARD_MAX = 10
OPENING_SHARE = 20  # percent of devices with an IPv6 opening
FORWARD_FIELDS = (
    "member_id",
    "public_address_id",
    "device_id",
    "protocol",
    "public_first",
    "public_last",
    "target_first",
    "target_last",
    "enabled",
    "description",
)
OPENING_FIELDS = ("device_id", "protocol", "port_first", "port_last", "description")
SHAPING_PROFILES = [
    # name, down kbit/s, up kbit/s, default, share of test accesses (percent)
    ("Test access", 4000, 1000, True, 80),
    ("Test access (slow)", 2000, 500, False, 20),
]


def _status_since(plan: Plan) -> dt.datetime:
    """When the demo member's status began, agreeing with the other dates on their page: a
    pending member has been waiting since registering, an active or test one since check-in."""
    if plan.status == MemberStatus.PENDING:
        return plan.registered
    if plan.ended is not None:
        return plan.ended
    if plan.status in (MemberStatus.ACTIVE, MemberStatus.TEST) and plan.checked_in:
        return plan.checked_in
    return plan.registered + 2 * DAY


def dhcp_demo_apply(seeder: NetworkSeeder) -> None:
    """The lab's walled garden: the portal at 203.0.113.80 (lab.sh portal-proxy) and, in the
    small layout, a registration range 10.100.2xx.0/24 per building (200 + its number)."""

    settings_row = DhcpSettings.load()
    if not settings_row.portal_addresses:
        settings_row.portal_addresses = "203.0.113.80"
        settings_row.save(update_fields=["portal_addresses"])
    if seeder.layout.large:
        return  # 10.<b>.0.0/16 per building: no lab range fits; benchmarks need none
    taken = set(RegistrationRange.objects.values_list("building_id", flat=True))
    RegistrationRange.objects.bulk_create(
        [
            RegistrationRange(building=building, network=f"10.100.{200 + b}.0/24")
            for b, building in seeder.buildings.items()
            if b <= 55 and building.pk not in taken
        ]
    )


class RulesSeeder:
    """Port forwards, IPv6 openings and shaped test accesses, in bulk and deterministic.

    A member's rules depend only on (seed, username) and their devices; members that have no
    forward and no opening yet get theirs, so running again changes nothing.
    """

    def __init__(self, *, seed: int) -> None:
        self.seed = seed

    def run(self, people: list[tuple[str, int]]) -> dict[str, int]:
        ManagementNetwork.objects.get_or_create(
            network="10.255.255.0/24", defaults={"note": "firewall lab management"}
        )
        profiles = self._profiles()
        names = {u for u, _ in people}
        members = [
            (pk, username, status)
            for pk, username, status in Member.objects.exclude(
                status__in=[MemberStatus.ENDED, MemberStatus.PENDING]
            ).values_list("pk", "user__username", "status")
            if username in names
        ]
        shaped = self._test_accesses(members, profiles)
        busy = set(PortForward.objects.values_list("member_id", flat=True).distinct())
        busy |= set(Ipv6Opening.objects.values_list("device__member_id", flat=True).distinct())
        todo = {pk: (username, status) for pk, username, status in members if pk not in busy}
        if not todo:
            return {"forwards": 0, "openings": 0, "test_accesses": shaped}
        # Whole tables, filtered here: an IN list of 100,000 ids costs more than the rows.
        public = {
            member_id: pk
            for member_id, pk in PublicAddress.objects.filter(member__isnull=False).values_list(
                "member_id", "id"
            )
            if member_id in todo
        }
        devices: dict[int, list[tuple[int, str, bool]]] = {}
        for pk, member_id, name, ipv6 in Device.objects.order_by("member_id", "id").values_list(
            "pk", "member_id", "name", "ipv6"
        ):
            if member_id in todo:
                devices.setdefault(member_id, []).append((pk, name, ipv6 is not None))
        forwards: list[tuple[Any, ...]] = []
        openings: list[tuple[Any, ...]] = []
        for member_id, (username, _status) in todo.items():
            own = devices.get(member_id)
            if not own:
                continue
            rng = random.Random(f"{self.seed}:{username}:rules")  # noqa: S311 - demo data
            if member_id in public:
                forwards += self._forwards(rng, member_id, public[member_id], own, username)
            openings += self._openings(rng, own, username)
        copy_insert(PortForward, list(FORWARD_FIELDS), forwards)
        copy_insert(Ipv6Opening, list(OPENING_FIELDS), openings)
        return {"forwards": len(forwards), "openings": len(openings), "test_accesses": shaped}

    def _profiles(self) -> list[tuple[ShapingProfile, int]]:
        result = []
        for name, down, up, default, share in SHAPING_PROFILES:
            profile, _created = ShapingProfile.objects.get_or_create(
                name=name,
                defaults={
                    "down_kbit": down,
                    "up_kbit": up,
                    "is_default": default
                    and not ShapingProfile.objects.filter(is_default=True).exists(),
                },
            )
            result.append((profile, share))
        return result

    def _test_accesses(
        self, members: list[tuple[int, str, str]], profiles: list[tuple[ShapingProfile, int]]
    ) -> int:
        have = set(TestAccess.objects.values_list("member_id", flat=True))
        rows = []
        for pk, username, status in members:
            if status != MemberStatus.TEST or pk in have:
                continue
            rng = random.Random(f"{self.seed}:{username}:shaping")  # noqa: S311 - demo data
            pick = rng.randrange(100)
            profile = profiles[-1][0]
            for candidate, share in profiles:
                if pick < share:
                    profile = candidate
                    break
                pick -= share
            rows.append((pk, profile.pk, EPOCH))
        copy_insert(TestAccess, ["member_id", "profile_id", "granted_at"], rows)
        return len(rows)

    def _forwards(
        self,
        rng: random.Random,
        member_id: int,
        address_id: int,
        devices: list[tuple[int, str, bool]],
        username: str,
    ) -> list[tuple[Any, ...]]:
        if username == "resident":
            plan = [(8080, 8080, "tcp", 0, 80, "web server"), (27015, 27020, "both", 1, 27015, "")]
        else:
            plan = []
            taken: list[tuple[int, int]] = []
            count = min(FORWARD_MAX, rng.randrange(FORWARD_DRAW))
            popular = rng.sample(POPULAR_PORTS, min(count, 3))
            for port, protocol, what in popular:
                target = port if rng.random() < 0.7 else rng.randrange(1024, 60000)
                plan.append((port, port, protocol, rng.randrange(len(devices)), target, what))
                taken.append((port, port))
            while len(plan) < count:
                first = rng.randrange(1024, 65000)
                last = first + (0 if rng.random() < 0.8 else rng.randrange(1, 10))
                if any(first <= b and a <= last for a, b in taken):
                    continue
                taken.append((first, last))
                protocol = rng.choice(("tcp", "tcp", "udp", "both"))
                plan.append((first, last, protocol, rng.randrange(len(devices)), first, ""))
        rows = []
        for first, last, protocol, index, target, what in plan:
            rows.append(
                (
                    member_id,
                    address_id,
                    devices[index % len(devices)][0],
                    protocol,
                    first,
                    last,
                    target,
                    target + last - first,
                    username == "resident" or rng.random() < 0.9,
                    what,
                )
            )
        return rows

    def _openings(
        self, rng: random.Random, devices: list[tuple[int, str, bool]], username: str
    ) -> list[tuple[Any, ...]]:
        rows = []
        for index, (pk, _name, has_ipv6) in enumerate(devices):
            if not has_ipv6:
                continue
            if username == "resident":
                if index == 0:
                    rows.append((pk, "tcp", 22, 22, ""))
                continue
            if rng.randrange(100) >= OPENING_SHARE:
                continue
            if rng.random() < 0.1:
                rows.append((pk, "both", None, None, "all ports"))
                continue
            port, protocol, what = rng.choice(POPULAR_PORTS)
            rows.append((pk, protocol, port, port, what))
        return rows
