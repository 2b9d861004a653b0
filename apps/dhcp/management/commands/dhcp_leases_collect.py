"""manage.py dhcp_leases_collect: read every DHCP host's leases now (what the beat does)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from apps.dhcp.services import leases_collect


class Command(BaseCommand):
    help = "Read the leases of every enabled DHCP host into the lease history now."

    def handle(self, *args: Any, **options: Any) -> None:
        outcomes = leases_collect()
        if not outcomes:
            self.stdout.write("dhcp_leases_collect: no enabled host serves DHCP")
            return
        for o in outcomes:
            if o.ok:
                self.stdout.write(
                    f"{o.host}: {o.leases} lease(s), {o.written} row(s) written"
                    + (f", {o.skipped} malformed skipped" if o.skipped else "")
                )
            else:
                self.stderr.write(f"{o.host}: FAILED: {o.error}")
        if not any(o.ok for o in outcomes):
            raise CommandError("no host answered")
