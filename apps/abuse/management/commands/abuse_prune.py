"""manage.py abuse_prune: forget ended address holdings past the retention (what the beat does)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from apps.abuse.services import holdings_prune, retention_days


class Command(BaseCommand):
    help = "Delete address holdings that ended more than PORTAL_ABUSE_HISTORY_DAYS ago."

    def handle(self, *args: Any, **options: Any) -> None:
        deleted = holdings_prune()
        self.stdout.write(f"abuse_prune: {deleted} holding(s) older than {retention_days()} days")
