"""network's part in memberships (apps/members/extensions.py): subnets, the public IPv4,
devices, forwards and openings, where the member services, pages and downloads need them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from apps.members.extensions import Found, MemberExtension
from apps.members.privacy import data_rows
from apps.network.hooks import network_changed_on_commit
from apps.network.models import Device, Family, Ipv6Opening, PortForward, PublicAddress, Subnet
from apps.network.search import member_search_found
from apps.network.services import (
    _device_delete,
    devices_readdress,
    port_forwards_release,
    public_ipv4_allocate,
    public_ipv4_release,
    room_ipv6_prefix_next,
    room_require_subnet,
)
from apps.network.views import devices_context

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

    from apps.members.models import Building, Member, Room

DEVICE_FIELDS = ("name", "mac", "ipv4", "ipv6", "created_at")
FORWARD_FIELDS = ("protocol", "public_first", "public_last", "target_first", "target_last",
                  "device__name", "enabled", "description")  # fmt: skip
OPENING_FIELDS = ("device__name", "protocol", "port_first", "port_last", "enabled", "description")


class NetworkMemberExtension(MemberExtension):
    """Registered by NetworkConfig.ready()."""

    def room_usable(self, *, room: Room) -> bool:
        return Subnet.objects.filter(building_id=room.building_id, family=Family.IPV4).exists()

    def room_prefix(self, *, building: Building) -> str | None:
        return room_ipv6_prefix_next(building=building)

    def member_checking_in(self, *, member: Member, actor: User | None) -> None:
        room_require_subnet(room=member.room)
        public_ipv4_allocate(member=member, actor=actor)

    def member_moving(self, *, member: Member, room: Room, actor: User) -> None:
        room_require_subnet(room=room)
        devices_readdress(member=member, room=room, actor=actor)

    def member_ending(self, *, member: Member, actor: User) -> None:
        # Port forwards are disabled and detached before the address goes into quarantine (they
        # stay as history without a device); the devices' IPv6 openings go with the devices.
        port_forwards_release(member=member, actor=actor)
        public_ipv4_release(member=member, actor=actor)
        for device in Device.objects.filter(member=member).select_related("member").order_by("id"):
            _device_delete(device=device, actor=actor, action="device.remove")

    def member_changed(self, *, cause: str, actor: User | None) -> None:
        network_changed_on_commit(cause=cause, actor=actor)

    def member_search(self, *, kind: str, query: str, limit: int) -> Found:
        return member_search_found(kind=kind, query=query, limit=limit)

    def member_page_context(self, *, request: HttpRequest, member: Member) -> dict[str, Any]:
        return devices_context(request=request, member=member)

    def member_data(self, *, member: Member) -> dict[str, Any]:
        return {
            "public_ipv4": data_rows(
                PublicAddress.objects.filter(member=member), "address", "assigned_at"
            ),
            "devices": data_rows(
                Device.objects.filter(member=member).order_by("id"), *DEVICE_FIELDS
            ),
            "port_forwards": data_rows(
                PortForward.objects.filter(member=member).order_by("id"), *FORWARD_FIELDS
            ),
            "ipv6_openings": data_rows(
                Ipv6Opening.objects.filter(device__member=member).order_by("id"), *OPENING_FIELDS
            ),
        }

    def member_erase(self, *, member: Member) -> None:
        PortForward.objects.filter(member=member, device__isnull=True).delete()
