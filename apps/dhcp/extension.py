"""The DHCP app's part in the pages of the floors below it: the members app's office-hours
search and member page (apps/members/extensions.py), network's device rows
(apps/network/extensions.py). Each reads the leases the hosts reported."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from apps.dhcp.selectors import lease_search, newest_leases, unknown_devices_near
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
