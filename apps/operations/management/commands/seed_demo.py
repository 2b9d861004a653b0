"""Deterministic demo data: the four demo logins, N members with rooms, devices and addresses.

Small runs (up to 200 members) use the lab ranges: 10.100.<b>.0/24 per building, public pool
198.51.100.0/24, IPv6 2001:db8:100::/48 (a /56 per building, a /64 per room). Larger runs use the
benchmark ranges: 10.<b>.0.0/16 per building and the public pool 198.18.0.0/15; above 62,500
members the buildings hold 500 rooms each and an IPv6 /48 (2001:db8:2<bb>::/48). The big tables
are written with COPY (a tenth of bulk_create's time at 100,000 members).
"""

from __future__ import annotations

import random
import time
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction

from apps.abuse.backfill import holdings_backfill
from apps.accounts.roles import Role
from apps.members.models import Member, Room
from apps.network.models import (
    Device,
    Ipv6Opening,
    PortForward,
    PublicAddress,
)
from apps.operations.demo import MAX_SITES, Layout, NetworkSeeder, RulesSeeder, copy_insert
from apps.testaccess.models import TestAccess
from apps.tickets.models import CannedResponse

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
            "--sites",
            type=int,
            default=0,
            help="split the buildings into this many firewall sites, each with its own pair of "
            "(disabled) firewall hosts; 0: leave the sites as they are",
        )
        parser.add_argument(
            "--force", action="store_true", help="allow demo logins (password 'demo') without DEBUG"
        )

    def handle(
        self, *args: Any, members: int, seed: int, sites: int, force: bool, **options: Any
    ) -> None:
        if not settings.DEBUG and not force:
            raise CommandError(
                "Refusing to create demo logins with the password 'demo' while DEBUG is off; "
                "pass --force if this really is a demo installation."
            )
        if members < 0:
            raise CommandError("--members must be 0 or more.")
        if not 0 <= sites <= MAX_SITES:
            raise CommandError(f"--sites must be between 0 and {MAX_SITES}.")
        started = time.monotonic()
        layout = Layout.for_count(members)
        with transaction.atomic():
            created_demo = self._demo_users()
            self._canned_responses()
            created_members = self._members(count=members, seed=seed)
            network = NetworkSeeder(layout=layout, seed=seed)
            network.prepare(members, sites=sites)
            network.dhcp_demo()
            people = [("resident", 1)] + [(f"member{n:05d}", n) for n in range(1, members + 1)]
            made = network.memberships(people)
            rules = RulesSeeder(seed=seed).run(people)
            made_sites = network.sites(sites) if sites else []
            if members <= 200:  # the lab demo: its addresses get a history the abuse desk can ask
                holdings_backfill()
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
            f"{rules['test_accesses']} shaped test access(es), "
            f"{len(made_sites)} site(s) with two firewall hosts each "
            f"in {time.monotonic() - started:.1f} s (password for demo logins: {DEMO_PASSWORD})"
        )

    @staticmethod
    def _canned_responses() -> None:
        """A few answers support gives every week (idempotent: kept as edited)."""

        for title, body in (
            (
                "Restart the router",
                "Hello {first_name},\n\nplease unplug your router for ten seconds and plug it "
                "in again; most connection problems end there. If it still does not work, "
                "answer this mail with the time it stopped.\n\nYour network team",
            ),
            (
                "Register the device",
                "Hello {first_name},\n\nthe device is not registered yet: open the portal on "
                "it, log in and register it (its MAC address is filled in).\n\nYour network team",
            ),
            (
                "Known outage",
                "Hello {first_name},\n\nthank you for your message about {ticket_number}. We "
                "know about the outage and are working on it; the status page says when it is "
                "over.\n\nYour network team",
            ),
        ):
            CannedResponse.objects.get_or_create(title=title, defaults={"body": body})

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
        existing = set(
            user_model.objects.filter(username__regex=r"^member[0-9]+$").values_list(
                "username", flat=True
            )
        )
        missing = [
            name for name in (f"member{n:05d}" for n in range(1, count + 1)) if name not in existing
        ]
        if not missing:
            return 0
        password = make_password(None)  # unusable: members set theirs by password reset
        rows = []
        for username in missing:
            rng = random.Random(f"{seed}:{username}")  # noqa: S311 - demo data, not secrets
            first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
            rows.append((username, first, last, f"{username}@example.org", password))
        copy_insert(user_model, ["username", "first_name", "last_name", "email", "password"], rows)
        member_group = Group.objects.get(name=Role.MEMBER)
        new = set(missing)
        copy_insert(
            user_model.groups.through,
            ["user_id", "group_id"],
            (
                (uid, member_group.id)
                for uid, username in user_model.objects.filter(username__regex=r"^member[0-9]+$")
                .order_by("id")
                .values_list("id", "username")
                if username in new
            ),
        )
        return len(missing)
