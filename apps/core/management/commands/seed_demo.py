"""Deterministic demo data: the four demo logins, N members with rooms, devices and addresses.

Small runs (up to 200 members) use the lab ranges: 10.100.<b>.0/24 per building, public pool
198.51.100.0/24, IPv6 2001:db8:100::/48 (a /56 per building, a /64 per room). Larger runs use the
benchmark ranges: 10.<b>.0.0/16 per building and the public pool 198.18.0.0/15.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import random
import string
import time
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group
from django.contrib.postgres.fields.ranges import DateTimeTZRange
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from django.utils import timezone

from apps.accounts.roles import Role
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
    TestAccess,
)
from apps.network.services import device_ipv6

DEMO_PASSWORD = "demo"  # noqa: S105 - shown in the README; refused without DEBUG unless --force
DEMO_USERS = [
    # username, first name, last name, roles, Django admin access
    ("resident", "Rita", "Resident", [Role.MEMBER], False),
    ("volunteer", "Viktor", "Volunteer", [Role.VOLUNTEER], False),
    ("support", "Sofia", "Support", [Role.SUPPORT], False),
    ("admin", "Ada", "Admin", [Role.ADMIN], True),
]
FIRST_NAMES = [
    "Anna",
    "Ben",
    "Chen",
    "Dana",
    "Emil",
    "Fatima",
    "Georg",
    "Hana",
    "Ilya",
    "Jonas",
    "Kemal",
    "Lea",
    "Mateo",
    "Nora",
    "Olu",
    "Priya",
    "Quentin",
    "Rosa",
    "Sven",
    "Tariq",
    "Uma",
    "Vera",
    "Wen",
    "Ximena",
    "Yusuf",
    "Zoe",
]
LAST_NAMES = [
    "Schmidt",
    "Müller",
    "Nguyen",
    "Kowalski",
    "García",
    "Okafor",
    "Tanaka",
    "Weber",
    "Rossi",
    "Yilmaz",
    "Jensen",
    "Novak",
    "Silva",
    "Fischer",
    "Haddad",
    "Ivanova",
    "Kim",
    "Larsen",
    "Meyer",
    "Patel",
    "Becker",
    "Dubois",
    "Hoffmann",
    "Ali",
]


class Command(BaseCommand):
    help = "Create deterministic demo data (idempotent; a larger --members adds the missing ones)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--members", type=int, default=50, help="number of member accounts")
        parser.add_argument(
            "--seed", type=int, default=1, help="random seed (same seed, same data)"
        )
        parser.add_argument(
            "--force", action="store_true", help="allow demo logins (password 'demo') without DEBUG"
        )

    def handle(self, *args: Any, members: int, seed: int, force: bool, **options: Any) -> None:
        if not settings.DEBUG and not force:
            raise CommandError(
                "Refusing to create demo logins with the password 'demo' while DEBUG is off; "
                "pass --force if this really is a demo installation."
            )
        if members < 0:
            raise CommandError("--members must be 0 or more.")
        started = time.monotonic()
        layout = Layout.for_count(members)
        with transaction.atomic():
            created_demo = self._demo_users()
            created_members = self._members(count=members, seed=seed)
            network = NetworkSeeder(layout=layout, seed=seed)
            network.prepare(members)
            people = [("resident", 1)] + [(f"member{n:05d}", n) for n in range(1, members + 1)]
            made = network.memberships(people)
            rules = RulesSeeder(seed=seed).run(people)
        if made["members"] > 1000 or rules["forwards"] > 1000:
            # Fresh statistics after a bulk load, so the planner uses the search indexes at once.
            with connection.cursor() as cursor:
                for model in (
                    get_user_model(),
                    Member,
                    Room,
                    Device,
                    PublicAddress,
                    PortForward,
                    Ipv6Opening,
                    TestAccess,
                ):
                    cursor.execute(f"ANALYZE {model._meta.db_table}")
        self.stdout.write(
            f"seed_demo: {created_demo} demo login(s) and {created_members} member(s) created, "
            f"{made['members']} membership(s) with {made['devices']} device(s), "
            f"{rules['forwards']} port forward(s), {rules['openings']} IPv6 opening(s), "
            f"{rules['test_accesses']} shaped test access(es) "
            f"in {time.monotonic() - started:.1f} s (password for demo logins: {DEMO_PASSWORD})"
        )

    def _demo_users(self) -> int:
        user_model = get_user_model()
        groups = {g.name: g for g in Group.objects.all()}
        created = 0
        for username, first, last, roles, is_admin in DEMO_USERS:
            user, was_created = user_model.objects.get_or_create(
                username=username,
                defaults={
                    "first_name": first,
                    "last_name": last,
                    "email": f"{username}@example.org",
                    "is_staff": is_admin,
                    "is_superuser": is_admin,
                    "password": make_password(DEMO_PASSWORD),
                },
            )
            if was_created:
                user.groups.set([groups[role] for role in roles])
                created += 1
        return created

    def _members(self, *, count: int, seed: int) -> int:
        """Member accounts member00001..; each one's data depends only on (seed, number)."""
        user_model = get_user_model()
        wanted = {f"member{n:05d}": n for n in range(1, count + 1)}
        existing = set(
            user_model.objects.filter(username__in=list(wanted)).values_list("username", flat=True)
        )
        missing = [name for name in wanted if name not in existing]
        if not missing:
            return 0
        password = make_password(None)  # unusable: members set theirs by password reset
        new_users = []
        for username in missing:
            rng = random.Random(f"{seed}:{username}")  # noqa: S311 - demo data, not secrets
            first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
            new_users.append(
                user_model(
                    username=username,
                    first_name=first,
                    last_name=last,
                    email=f"{username}@example.org",
                    password=password,
                )
            )
        user_model.objects.bulk_create(new_users, batch_size=2000)
        member_group = Group.objects.get(name=Role.MEMBER)
        ids = user_model.objects.filter(username__in=missing).values_list("id", flat=True)
        through = user_model.groups.through
        through.objects.bulk_create(
            [through(user_id=uid, group_id=member_group.id) for uid in ids], batch_size=5000
        )
        return len(missing)


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
DEVICE_NAMES = ["laptop", "phone", "tablet", "desktop", "console", "tv", "printer", "watch"]
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Layout:
    """Address ranges and building sizes for a demo of a given size."""

    def __init__(self, *, rooms_per_building: int, pool: str, large: bool) -> None:
        self.rooms_per_building = rooms_per_building
        self.pool = pool
        self.large = large

    @classmethod
    def for_count(cls, members: int) -> Layout:
        if members <= 200:
            return cls(rooms_per_building=40, pool="198.51.100.0/24", large=False)
        if members > 250 * 250:
            raise CommandError("--members: at most 62,500 (250 buildings of 250 rooms).")
        return cls(rooms_per_building=250, pool="198.18.0.0/15", large=True)

    def ipv4_subnet(self, b: int) -> str:
        return f"10.{b}.0.0/16" if self.large else f"10.100.{b}.0/24"

    def ipv6_prefix(self, b: int) -> str:
        return f"2001:db8:100:{b:02x}00::/56"

    def room_prefix(self, b: int, index: int) -> str:
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

    def __init__(self, *, layout: Layout, seed: int) -> None:
        self.layout = layout
        self.seed = seed

    def prepare(self, members: int) -> None:
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
        count = max(2, -(-members // per))
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
                        Room(
                            building=building,
                            number=room_number(index),
                            label=label,
                            ipv6_prefix=self.layout.room_prefix(b, index),
                        )
                    )
        Room.objects.bulk_create(rooms, batch_size=5000)
        self.rooms = {r.label: r for r in Room.objects.select_related("building")}

    def _room_for(self, n: int) -> Room:
        per = self.layout.rooms_per_building
        b, index = divmod(n - 1, per)
        return self.rooms[Room.make_label(building_code(b + 1), room_number(index + 1))]

    def memberships(self, people: list[tuple[str, int]]) -> dict[str, int]:
        """Member rows (and everything hanging off them) for the logins that have none yet."""
        user_model = get_user_model()
        ids = dict(
            user_model.objects.filter(
                username__in=[u for u, _ in people], member__isnull=True
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
            plans.append((username, n, status, registered, devices, rng))
        members = []
        for username, n, status, registered, _devices, rng in plans:
            ended = status == MemberStatus.ENDED
            members.append(
                Member(
                    user_id=ids[username],
                    room=None if ended else self._room_for(n),
                    status=status,
                    status_since=registered + dt.timedelta(days=2),
                    registered_at=registered,
                    checked_in_at=None
                    if status == MemberStatus.PENDING
                    else registered + dt.timedelta(days=1),
                    test_access_until=(now + dt.timedelta(days=1 + n % 28)).date()
                    if status == MemberStatus.TEST
                    else None,
                    ended_at=registered + dt.timedelta(days=2) if ended else None,
                    phone=f"+49 30 {rng.randrange(1000000, 9999999)}",
                )
            )
        Member.objects.bulk_create(members, batch_size=5000)
        stays, changes = [], []
        for member, (_u, n, status, registered, _d, _r) in zip(members, plans, strict=True):
            room = self._room_for(n)
            stays.append(
                RoomStay(
                    member=member,
                    room=room,
                    period=DateTimeTZRange(registered, member.ended_at),
                )
            )
            changes.append(
                StatusChange(member=member, old_status="", new_status="pending", at=registered)
            )
            if status != MemberStatus.PENDING:
                changes.append(
                    StatusChange(
                        member=member,
                        old_status="pending",
                        new_status=status,
                        at=member.status_since,
                    )
                )
        RoomStay.objects.bulk_create(stays, batch_size=5000)
        StatusChange.objects.bulk_create(changes, batch_size=5000)
        PublicAddress.objects.bulk_create(self._public(members), batch_size=5000)
        devices = self._devices(members, plans)
        Device.objects.bulk_create(devices, batch_size=5000)
        return {"members": len(members), "devices": len(devices)}

    @staticmethod
    def _status(rng: random.Random) -> str:
        pick = rng.randrange(100)
        for status, weight in STATUS_WEIGHTS:
            if pick < weight:
                return status
            pick -= weight
        return MemberStatus.ACTIVE

    def _public(self, members: list[Member]) -> list[PublicAddress]:
        network = ipaddress.IPv4Network(self.pool.network)
        used = {
            int(ipaddress.IPv4Address(a))
            for a in PublicAddress.objects.filter(pool=self.pool).values_list("address", flat=True)
        }
        candidate = int(network.network_address) + 1
        last = int(network.broadcast_address) - 1
        rows = []
        for member in members:
            if member.status not in HOLDS_PUBLIC_IPV4:
                continue
            while candidate in used:
                candidate += 1
            if candidate > last:
                raise CommandError(f"The demo pool {network} is too small for this many members.")
            used.add(candidate)
            rows.append(
                PublicAddress(
                    pool=self.pool,
                    address=str(ipaddress.IPv4Address(candidate)),
                    member=member,
                    assigned_at=member.checked_in_at,
                )
            )
        return rows

    def _devices(self, members: list[Member], plans: list[Any]) -> list[Device]:
        used: dict[int, set[int]] = {}
        next_free: dict[int, int] = {}
        rows = []
        for member, (_u, n, _s, _reg, count, rng) in zip(members, plans, strict=True):
            if not count:
                continue
            room = member.room
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
            names = rng.sample(DEVICE_NAMES, count)
            for j in range(count):
                while next_free[b] in used[b]:
                    next_free[b] += 1
                address = next_free[b]
                used[b].add(address)
                mac = f"02:{self.seed & 255:02x}:{n >> 16 & 255:02x}:{n >> 8 & 255:02x}:{n & 255:02x}:{j:02x}"
                if n == 1 and _u == "resident":
                    mac = f"06:{self.seed & 255:02x}:00:00:00:{j:02x}"
                rows.append(
                    Device(
                        member=member,
                        name=names[j],
                        mac=mac,
                        ipv4=str(ipaddress.IPv4Address(address)),
                        ipv6=device_ipv6(room=room, mac=mac),
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
SHAPING_PROFILES = [
    # name, down kbit/s, up kbit/s, default, share of test accesses (percent)
    ("Test access", 4000, 1000, True, 80),
    ("Test access (slow)", 2000, 500, False, 20),
]


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
        members = list(
            Member.objects.filter(user__username__in=[u for u, _ in people])
            .exclude(status__in=[MemberStatus.ENDED, MemberStatus.PENDING])
            .values_list("pk", "user__username", "status")
        )
        shaped = self._test_accesses(members, profiles)
        busy = set(PortForward.objects.values_list("member_id", flat=True).distinct())
        busy |= set(Ipv6Opening.objects.values_list("device__member_id", flat=True).distinct())
        todo = {pk: (username, status) for pk, username, status in members if pk not in busy}
        if not todo:
            return {"forwards": 0, "openings": 0, "test_accesses": shaped}
        public = dict(
            PublicAddress.objects.filter(member_id__in=list(todo)).values_list("member_id", "id")
        )
        devices: dict[int, list[tuple[int, str, bool]]] = {}
        for pk, member_id, name, ipv6 in (
            Device.objects.filter(member_id__in=list(todo))
            .order_by("member_id", "id")
            .values_list("pk", "member_id", "name", "ipv6")
        ):
            devices.setdefault(member_id, []).append((pk, name, ipv6 is not None))
        forwards: list[PortForward] = []
        openings: list[Ipv6Opening] = []
        for member_id, (username, _status) in todo.items():
            own = devices.get(member_id)
            if not own:
                continue
            rng = random.Random(f"{self.seed}:{username}:rules")  # noqa: S311 - demo data
            if member_id in public:
                forwards += self._forwards(rng, member_id, public[member_id], own, username)
            openings += self._openings(rng, own, username)
        PortForward.objects.bulk_create(forwards, batch_size=5000)
        Ipv6Opening.objects.bulk_create(openings, batch_size=5000)
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
            rows.append(TestAccess(member_id=pk, profile=profile, granted_at=EPOCH))
        TestAccess.objects.bulk_create(rows, batch_size=5000)
        return len(rows)

    def _forwards(
        self,
        rng: random.Random,
        member_id: int,
        address_id: int,
        devices: list[tuple[int, str, bool]],
        username: str,
    ) -> list[PortForward]:
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
                PortForward(
                    member_id=member_id,
                    public_address_id=address_id,
                    device_id=devices[index % len(devices)][0],
                    protocol=protocol,
                    public_first=first,
                    public_last=last,
                    target_first=target,
                    target_last=target + last - first,
                    enabled=username == "resident" or rng.random() < 0.9,
                    description=what,
                )
            )
        return rows

    def _openings(
        self, rng: random.Random, devices: list[tuple[int, str, bool]], username: str
    ) -> list[Ipv6Opening]:
        rows = []
        for index, (pk, _name, has_ipv6) in enumerate(devices):
            if not has_ipv6:
                continue
            if username == "resident":
                if index == 0:
                    rows.append(
                        Ipv6Opening(device_id=pk, protocol="tcp", port_first=22, port_last=22)
                    )
                continue
            if rng.randrange(100) >= OPENING_SHARE:
                continue
            if rng.random() < 0.1:
                rows.append(Ipv6Opening(device_id=pk, protocol="both", description="all ports"))
                continue
            port, protocol, what = rng.choice(POPULAR_PORTS)
            rows.append(
                Ipv6Opening(
                    device_id=pk,
                    protocol=protocol,
                    port_first=port,
                    port_last=port,
                    description=what,
                )
            )
        return rows
