"""The DHCP app's part in the floors below it: the members app's office-hours search and member
page (apps/members/extensions.py) and network's device rows (apps/network/extensions.py) show
the leases the hosts reported; the firewall snapshot carries its settings and registration
ranges (apps/firewall/extensions.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from apps.dhcp.models import DhcpSettings, RegistrationRange, ipv4_list
from apps.dhcp.selectors import lease_search, newest_leases, unknown_devices_near
from apps.firewall.extensions import DhcpRead, FirewallExtension
from apps.members.extensions import MemberExtension
from apps.network.extensions import NetworkExtension

if TYPE_CHECKING:
    from django.http import HttpRequest

    from apps.members.models import Member
    from apps.network.models import Device


class DhcpMemberExtension(MemberExtension):
    def office_hours_context(
        self, *, request: HttpRequest, kind: str, query: str
    ) -> dict[str, Any]:
        """The newest leases of the MAC or address searched for."""
        return {"leases": lease_search(kind=kind, query=query)}

    def staff_member_context(self, *, request: HttpRequest, member: Member) -> dict[str, Any]:
        """Unregistered devices seen lately in the member's building (one click registers)."""
        if member.is_ended:
            return {"unknown_devices": []}
        building_id = member.room.building_id if member.room_id else None
        return {"unknown_devices": unknown_devices_near(building_id=building_id)}


class DhcpNetworkExtension(NetworkExtension):
    def devices_shown(self, *, devices: list[Device]) -> None:
        """Each device's newest DHCP lease as `device.lease` (None: no host reported one yet)."""
        newest = newest_leases([d.mac for d in devices])
        for device in devices:
            device.lease = newest.get(device.mac)  # type: ignore[attr-defined]


class DhcpFirewallExtension(FirewallExtension):
    def snapshot_dhcp_read(self) -> DhcpRead:
        """The settings row (its defaults until an admin saved it) and the enabled registration
        ranges, read in the caller's transaction (the snapshot's consistent view)."""
        row = DhcpSettings.objects.filter(id=1).first() or DhcpSettings(id=1)
        ranges = RegistrationRange.objects.filter(enabled=True).values_list(
            "building_id", "network"
        )
        return DhcpRead(
            registration_by_building=dict(ranges),
            portal_addresses=tuple(ipv4_list(row.portal_addresses)),
            dns_servers=tuple(ipv4_list(row.dns_servers)),
            domain_name=row.domain_name,
            lease_seconds=row.lease_seconds,
            registration_lease_seconds=row.registration_lease_seconds,
            captive_portal_url=row.captive_portal_url,
        )
