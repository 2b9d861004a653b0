"""manage.py lab_resolver: the lab's hosts serve the members' names (lab.sh up starts Unbound on
each, and an authoritative server of the test zone `example.` in pl-inet): each host's resolver
fields from var/lab/lab.json, and the sites' resolvers forward to pl-inet's server, so lab
devices resolve `www.example` and no query leaves the lab (docs/dns.md). Idempotent."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from apps.dhcp.models import DhcpSettings
from apps.firewall.models import HOST_PATH_VALIDATOR, FirewallHost


def _ipv4(value: Any, what: str) -> str:
    try:
        return str(ipaddress.IPv4Address(value))
    except (ValueError, TypeError):
        raise CommandError(f"lab.json {what}: {value!r} is not an IPv4 address") from None


def _path(value: Any, what: str) -> str:
    try:
        HOST_PATH_VALIDATOR(str(value))
    except ValidationError:
        raise CommandError(f"lab.json {what}: bad path {value!r}") from None
    return str(value)


class Command(BaseCommand):
    help = "Turn on the members' resolver on the lab's hosts (after lab_register)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--file", default=str(settings.VAR_DIR / "lab" / "lab.json"))

    def handle(self, *args: Any, file: str, **options: Any) -> None:
        path = Path(file)
        try:
            lab = json.loads(path.read_text())
            hosts = [h for h in lab["hosts"] if isinstance(h.get("resolver"), dict)]
            upstream = lab.get("dns_upstream")
        except FileNotFoundError:
            raise CommandError(f"{path} does not exist: build the lab first (make lab).") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CommandError(f"{path} is not a lab description: {exc}") from None
        if not hosts or not upstream:
            self.stdout.write("lab_resolver: this lab runs no resolver; nothing changed")
            return
        with transaction.atomic():
            for entry in hosts:
                name, resolver = str(entry["name"]), entry["resolver"]
                fields = {
                    "resolver_address": _ipv4(resolver.get("address"), f"{name} resolver"),
                    "unbound_control_socket": _path(
                        resolver.get("control_socket", ""), f"{name} control_socket"
                    ),
                    "unbound_pid_file": _path(resolver.get("pid_file", ""), f"{name} pid_file"),
                    "unbound_user": str(resolver.get("user", "")),
                }
                if not FirewallHost.objects.filter(name=name).update(**fields):
                    raise CommandError(f"{name} is not registered: run lab_register first")
            row = DhcpSettings.load()
            forwarder = _ipv4(upstream, "dns_upstream")
            if row.resolver_forwarders != forwarder:
                row.resolver_forwarders = forwarder
                row.save()
        names = ", ".join(str(h["name"]) for h in hosts)
        self.stdout.write(f"lab_resolver: {names} serve names, forwarding to {forwarder}")
