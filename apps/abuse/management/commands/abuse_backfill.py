"""manage.py abuse_backfill: fill the address-holder history from the audit trail (once after
deploying the abuse lookup; running it again adds nothing twice)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from apps.abuse.backfill import holdings_backfill


class Command(BaseCommand):
    help = "Reconstruct address holdings from the audit trail and the current state."

    def handle(self, *args: Any, **options: Any) -> None:
        o = holdings_backfill()
        self.stdout.write(
            f"abuse_backfill: {o.entries} audit entries replayed, {o.written} holding(s) written, "
            f"{o.already_known} already known, {o.unconfirmed} running but not confirmed by the "
            f"current state (left out), {o.from_current_state} from the current state"
        )
