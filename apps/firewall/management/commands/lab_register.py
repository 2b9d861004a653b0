"""Register the lab's firewall hosts (deploy/lab/lab.sh writes var/lab/lab.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import validate_ipv46_address
from django.db import transaction

from apps.firewall.models import FirewallHost


class Command(BaseCommand):
    help = "Create or update the firewall hosts of the local lab (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--file", default=str(settings.VAR_DIR / "lab" / "lab.json"))

    def handle(self, *args: Any, file: str, **options: Any) -> None:
        path = Path(file)
        try:
            lab = json.loads(path.read_text())
            hosts = lab["hosts"]
            interfaces = lab.get("interfaces", {})
        except FileNotFoundError:
            raise CommandError(f"{path} does not exist: build the lab first (make lab).") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise CommandError(f"{path} is not a lab description: {exc}") from None
        with transaction.atomic():
            for order, entry in enumerate(hosts):
                name, address = str(entry["name"]), str(entry["address"])
                try:
                    validate_ipv46_address(address)
                except ValidationError:
                    raise CommandError(
                        f"{path}: host {name}: {address!r} is not an IPv4 or IPv6 address"
                    ) from None
                host, created = FirewallHost.objects.update_or_create(
                    name=name,
                    defaults={
                        "address": address,
                        "port": int(lab.get("port", 22)),
                        "ssh_user": str(lab.get("user", "root")),
                        "rollout_order": order,
                        "member_interfaces": interfaces.get("member_side", "dorm0"),
                        "uplink_interfaces": interfaces.get("internet_side", "inet0"),
                    },
                )
                verb = "registered" if created else "up to date"
                self.stdout.write(f"lab_register: {host.name} ({host.address}) {verb}")
