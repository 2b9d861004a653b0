"""Check that PostgreSQL and Redis answer, with a message that says what to fix."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from apps.core.checks import KEY_HINT, secret_key_problems
from apps.infra.redis import redis_client


def redact(url: str) -> str:
    """Hide the password in a URL for messages."""
    return re.sub(r"(//[^:/@]+:)[^@]*@", r"\1***@", url)


class Command(BaseCommand):
    help = "Check the database and Redis connections; exit non-zero with a clear message."

    def handle(self, *args: Any, **options: Any) -> None:
        problems = [f"{p.msg} {KEY_HINT}" for p in secret_key_problems()]
        db = settings.DATABASES["default"]
        try:
            connection.ensure_connection()
        except Exception as exc:
            where = f"{db.get('HOST') or 'localhost'}:{db.get('PORT') or 5432}/{db.get('NAME')}"
            hint = "Check DATABASE_URL." if "DATABASE_URL" in _env() else "Run `make services`."
            problems.append(f"Cannot connect to PostgreSQL at {where}: {_first_line(exc)} {hint}")
        try:
            redis_client().ping()
        except Exception as exc:
            hint = next(
                (f"Check {name}." for name in ("REDIS_SENTINELS", "REDIS_URL") if name in _env()),
                "Run `make services`.",
            )
            problems.append(
                f"Cannot connect to Redis at {redact(settings.REDIS_URL)}: {_first_line(exc)} {hint}"
            )
        if problems:
            raise CommandError("\n".join(problems))
        self.stdout.write("preflight: PostgreSQL and Redis answer.")


def _env() -> set[str]:
    import os

    return {k for k, v in os.environ.items() if v}


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else exc.__class__.__name__
