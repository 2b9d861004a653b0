"""manage.py dhcp_leases_collect: read every DHCP host's leases now (what the beat does)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from apps.dhcp.models import LeaseCursor
from apps.dhcp.services import leases_collect
from apps.firewall.transport import LEASE_POOL


class Command(BaseCommand):
    help = "Read the leases of every enabled DHCP host into the lease history now."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--full",
            action="store_true",
            help="Every lease from each host's Kea, not only what changed since the last reading.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["full"]:
            LeaseCursor.objects.all().delete()
        try:
            outcomes = leases_collect()
        finally:
            LEASE_POOL.close()  # a one-off process: its connections end with it
        if not outcomes:
            self.stdout.write("dhcp_leases_collect: no enabled host serves DHCP")
            return
        for o in outcomes:
            if o.ok:
                read = (
                    f"{o.leases} lease(s)"
                    if o.full
                    else f"{o.leases} lease(s) changed and {o.gone} gone since the last reading"
                )
                self.stdout.write(
                    f"{o.host}: {read}, {o.written} row(s) written"
                    + (f", {o.skipped} malformed skipped" if o.skipped else "")
                )
            else:
                self.stderr.write(f"{o.host}: FAILED: {o.error}")
        if not any(o.ok for o in outcomes):
            raise CommandError("no host answered")
