"""manage.py traffic_collect: read every host's traffic counters now (what the beat does)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from apps.traffic.services import traffic_collect


def _size(octets: int) -> str:
    value = float(octets)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{octets} B"


class Command(BaseCommand):
    help = "Read the traffic counters of every enabled firewall host into the buckets now."

    def handle(self, *args: Any, **options: Any) -> None:
        outcomes = traffic_collect()
        if not outcomes:
            self.stdout.write("traffic_collect: no enabled firewall host belongs to a site")
            return
        for o in outcomes:
            if o.ok:
                line = f"{o.host}: {o.keys} key(s), {o.changed} changed, {_size(o.octets)} new"
                if o.unattributed:
                    line += f" ({_size(o.unattributed)} of addresses nobody holds now)"
                if o.skipped:
                    line += f", {o.skipped} malformed skipped"
                self.stdout.write(line)
            else:
                self.stderr.write(f"{o.host}: FAILED: {o.error}")
        if not any(o.ok for o in outcomes):
            raise CommandError("no host answered")
