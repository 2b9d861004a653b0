"""manage.py lab_clients: every networked device of the lab's site gets its address the way a
real device does: `lab.sh client MAC` starts dhclient in a device namespace, Kea answers."""

from __future__ import annotations

import ipaddress
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.firewall.management.commands.lab_register import LAB_MEMBER_NETWORKS, LAB_SCRIPT
from apps.members.choices import NETWORKED_STATUSES
from apps.network.models import Device


def lab_client(mac: str) -> str:
    result = subprocess.run(  # noqa: S603 - fixed script; the MAC comes from the database's macaddr
        ["/bin/bash", str(LAB_SCRIPT), "client", mac],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = result.stdout.strip().splitlines()
    return lines[-1] if lines else (result.stderr.strip().splitlines() or ["no lease"])[-1]


class Command(BaseCommand):
    help = "Start a lab DHCP client for every networked device (its MAC) and check its lease."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--limit", type=int, default=200, help="at most this many devices")
        parser.add_argument("--parallel", type=int, default=16, help="clients started at once")

    def handle(self, *args: Any, limit: int, parallel: int, **options: Any) -> None:
        member_side = [ipaddress.ip_network(n) for n in LAB_MEMBER_NETWORKS]
        devices = [
            (mac, ipv4)
            for mac, ipv4 in Device.objects.filter(member__status__in=NETWORKED_STATUSES)
            .order_by("pk")
            .values_list("mac", "ipv4")[: max(0, limit)]
            if any(ipaddress.ip_address(ipv4) in n for n in member_side)
        ]
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=max(1, min(parallel, 32))) as pool:
            leased = list(pool.map(lab_client, [mac for mac, _ in devices]))
        wrong = [
            f"{mac}: expected {ipv4}, got {got}"
            for (mac, ipv4), got in zip(devices, leased, strict=True)
            if got != ipv4
        ]
        self.stdout.write(
            f"lab_clients: {len(devices) - len(wrong)} of {len(devices)} device(s) leased their "
            f"reserved address in {time.monotonic() - started:.1f} s"
        )
        for line in wrong[:20]:
            self.stderr.write(f"lab_clients: {line}")
        if wrong:
            raise CommandError(f"{len(wrong)} device(s) did not lease their reserved address")
