"""Deterministic demo data: the four demo logins and N member accounts."""

from __future__ import annotations

import random
import time
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from apps.accounts.roles import Role

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
        with transaction.atomic():
            created_demo = self._demo_users()
            created_members = self._members(count=members, seed=seed)
        self.stdout.write(
            f"seed_demo: {created_demo} demo login(s) and {created_members} member(s) created "
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
