"""Register the lab's firewall hosts (deploy/lab/lab.sh writes var/lab/lab.json)."""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import validate_ipv46_address
from django.db import transaction

from apps.firewall.models import HOST_PATH_VALIDATOR, FirewallHost, Site, validate_virtual_addresses
from apps.members.choices import NETWORKED_STATUSES
from apps.network.models import Device, NetworkSettings

LAB_SCRIPT = Path(settings.BASE_DIR) / "deploy" / "lab" / "lab.sh"
LAB_MEMBER_NETWORKS = ("10.100.0.0/16", "2001:db8:100::/48")  # the lab contract's member side


def _checked_paths(entry: dict[str, Any], fields: dict[str, Any], names: tuple[str, ...]) -> dict:
    """`fields`, once every path in `names` is one the host settings accept."""
    for name in names:
        try:
            HOST_PATH_VALIDATOR(fields[name])
        except ValidationError:
            raise CommandError(
                f"lab host {entry.get('name')}: bad {name} {fields[name]!r}"
            ) from None
    return fields


class Command(BaseCommand):
    help = "Create or update the firewall hosts of the local lab (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--file", default=str(settings.VAR_DIR / "lab" / "lab.json"))
        parser.add_argument(
            "--no-devices",
            action="store_true",
            help="do not put the members' device addresses into pl-dorm",
        )

    def handle(self, *args: Any, file: str, no_devices: bool = False, **options: Any) -> None:
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
            self._site_failover(lab)
            self._probe(lab)
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
                        "management_interfaces": interfaces.get("management", ""),
                        **self._dhcp_fields(entry),
                        **self._ha_fields(entry),
                    },
                )
                if not created:
                    # The lab was (re)built: what its hosts run is unknown; push in full.
                    host.mark_pending()
                verb = "registered" if created else "up to date"
                self.stdout.write(f"lab_register: {host.name} ({host.address}) {verb}")

        if not no_devices:
            self._devices_into_lab()

    @staticmethod
    def _dhcp_fields(entry: dict[str, Any]) -> dict[str, Any]:
        """The lab's hosts run Kea (lab.sh up starts it): its socket and lease file per host."""
        dhcp = entry.get("dhcp")
        if not isinstance(dhcp, dict):
            return {"serves_dhcp": False}
        fields = {
            "serves_dhcp": True,
            "kea_control_socket": str(dhcp["control_socket"]),
            "kea_lease_file": str(dhcp["lease_file"]),
            "ra_pid_file": str(dhcp.get("ra_pid_file", "/run/portal-ra.pid")),
        }
        return _checked_paths(
            entry, fields, ("kea_control_socket", "kea_lease_file", "ra_pid_file")
        )

    @staticmethod
    def _ha_fields(entry: dict[str, Any]) -> dict[str, Any]:
        """The lab's hosts are a pair (lab.sh up starts keepalived and conntrackd)."""
        ha = entry.get("ha")
        if not isinstance(ha, dict):
            return {"sync_interface": ""}
        fields = {
            "sync_interface": str(ha["sync_interface"]),
            "sync_address4": str(ipaddress.IPv4Address(ha["sync_address4"])),
            "sync_address6": str(ipaddress.IPv6Address(ha["sync_address6"])),
            "ha_run_dir": str(ha["run_dir"]),
            "ha_notify": str(ha["notify"]),
            "conntrackd_config": str(ha["conntrackd_config"]),
        }
        return _checked_paths(entry, fields, ("ha_run_dir", "ha_notify", "conntrackd_config"))

    @staticmethod
    def _site_failover(lab: dict[str, Any]) -> None:
        """The lab's virtual addresses (lab.json "virtual_addresses") on the hosts' site."""
        lines = lab.get("virtual_addresses")
        if not isinstance(lines, list):
            return

        text = "\n".join(str(line) for line in lines)
        try:
            validate_virtual_addresses(text)
        except ValidationError as exc:
            raise CommandError(f"lab.json virtual_addresses: {exc.messages[0]}") from None
        Site.objects.filter(pk=Site.default_pk()).update(virtual_addresses=text)

    @staticmethod
    def _probe(lab: dict[str, Any]) -> None:
        """The lab's probe host (pl-probe) tests the members' forwards from outside."""
        probe = lab.get("probe")
        if not isinstance(probe, dict):
            return

        address = str(ipaddress.ip_address(probe["address"]))
        NetworkSettings.objects.update_or_create(id=1, defaults={"probe_address": address})

    def _devices_into_lab(self) -> None:
        """Give pl-dorm the addresses of the networked devices, so forwards can be tried."""

        member_side = [ipaddress.ip_network(n) for n in LAB_MEMBER_NETWORKS]
        addresses = []
        for pair in Device.objects.filter(member__status__in=NETWORKED_STATUSES).values_list(
            "ipv4", "ipv6"
        ):
            for value in pair:
                if value and any(ipaddress.ip_address(value) in n for n in member_side):
                    addresses.append(str(ipaddress.ip_address(value)))
        for start in range(0, len(addresses), 200):
            result = subprocess.run(  # noqa: S603 - fixed script, validated addresses as argv
                ["/bin/bash", str(LAB_SCRIPT), "device-add", *addresses[start : start + 200]],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            if result.returncode != 0:
                raise CommandError(f"lab.sh device-add failed: {result.stderr.strip()[-500:]}")
        self.stdout.write(f"lab_register: {len(addresses)} device address(es) in pl-dorm")
