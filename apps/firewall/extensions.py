"""How the apps built on firewall take part in its pages and its rollout, without firewall
importing them (the same style as apps/members/extensions.py).

The health app stands on firewall: it reads the hosts back, keeps their samples, warnings and
drift. firewall imports none of it; where its pages or the rollout order need health, it asks
every registered `FirewallExtension` (health registers one in its AppConfig.ready()).

- `host_list_context`, `host_detail_context`: the health parts of the Firewalls page and of one
  host's page (states with warnings, the newest sample, the charts, quota hits).
- `snapshot_dhcp_read`: the DHCP settings and registration ranges the snapshot carries (dhcp
  registers it; read inside the snapshot's transaction, one consistent view).
- `host_roles`: each paired host's VRRP roles from its newest reachable sample, so the rollout
  pushes the backup first (apps/firewall/order.py `backup_first`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from apps.firewall.models import FirewallHost

Roles = dict[str, str | None]  # VRRP instance name -> its state ("MASTER", "BACKUP", ...)


@dataclass(frozen=True, slots=True)
class DhcpRead:
    """What the snapshot carries of the DHCP app's settings, addresses parsed."""

    registration_by_building: dict[int, str]  # building id -> its registration range
    portal_addresses: tuple[str, ...]
    dns_servers: tuple[str, ...]
    domain_name: str
    lease_seconds: int
    registration_lease_seconds: int
    captive_portal_url: str

    @property
    def captive_proxy(self) -> str | None:
        """Where a walled device's HTTP is sent: the first portal address, once a captive-portal
        URL is set (its proxy answers every name with a redirect to the "not registered" page)."""
        addresses = self.portal_addresses
        return addresses[0] if self.captive_portal_url and addresses else None


class FirewallExtension:
    """One app's part in the firewall pages and rollout; every method does nothing by default."""

    def host_list_context(self) -> dict[str, Any]:
        """This app's part of the Firewalls page."""
        return {}

    def host_detail_context(self, *, host: FirewallHost) -> dict[str, Any]:
        """This app's part of one host's page."""
        return {}

    def snapshot_dhcp_read(self) -> DhcpRead | None:
        """The DHCP part of the snapshot, or None when this app holds none."""
        return None

    def host_roles(self, *, hosts: list[FirewallHost]) -> dict[int, Roles]:
        """Host pk -> its VRRP roles, for the hosts this app knows them of."""
        return {}


_extensions: list[FirewallExtension] = []


def firewall_extension_register(extension: FirewallExtension) -> None:
    """Add an app's part (from its AppConfig.ready(); once per class)."""
    if not any(type(known) is type(extension) for known in _extensions):
        _extensions.append(extension)


def firewall_extensions() -> tuple[FirewallExtension, ...]:
    """The registered parts, in registration order."""
    return tuple(_extensions)


def snapshot_dhcp_read() -> DhcpRead:
    """The first answer of `FirewallExtension.snapshot_dhcp_read` (the dhcp app's)."""
    for extension in _extensions:
        if (read := extension.snapshot_dhcp_read()) is not None:
            return read
    raise LookupError("no app reads the DHCP settings (is apps.dhcp installed?)")
