"""Compile the database and roll it out to the firewalls: queued for the worker, or now."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.firewall.compiled import CompileError
from apps.firewall.models import Site
from apps.firewall.pipeline import LockBusy, firewall_change_request, site_lock
from apps.firewall.rollout import site_sync


class Command(BaseCommand):
    help = "Push the current rule sets to every enabled firewall (queued unless --now)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--now", action="store_true", help="compile and push in this process")
        parser.add_argument("--cause", default="manage.py firewall_push")

    def handle(self, *args: Any, now: bool, cause: str, **options: Any) -> None:
        if not now:
            firewall_change_request(cause=cause, force=True)
            self.stdout.write("firewall_push: queued for the worker")
            return
        outcomes = []
        for site in Site.objects.filter(hosts__enabled=True).distinct():
            try:
                with site_lock(site.pk):
                    outcomes += site_sync(site=site, cause=cause)
            except LockBusy:
                raise CommandError(
                    f"another compile or rollout of site {site} is running; try again"
                ) from None
            except CompileError as exc:
                raise CommandError(f"the database cannot be compiled: {exc}") from None
        for outcome in outcomes:
            state = "ok" if outcome.ok else f"FAILED at {outcome.step}: {outcome.message}"
            self.stdout.write(f"{outcome.host}: {'unchanged' if outcome.skipped else state}")
        if any(not o.ok for o in outcomes):
            raise CommandError("not every firewall runs the new rule set")
