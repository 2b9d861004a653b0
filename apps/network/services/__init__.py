"""Writes to network state: addresses and devices. One transaction each, audited, hooked."""

from __future__ import annotations

from apps.network.services.devices import (
    _device_delete,
    device_add,
    device_change,
    device_remove,
    devices_readdress,
    room_require_subnet,
    subnet_create,
)
from apps.network.services.forwards import (
    FORWARD_USABLE_STATUSES,
    forward_conflict_message,
    ipv6_opening_change,
    ipv6_opening_create,
    ipv6_opening_delete,
    member_can_forward,
    opening_conflict_message,
    port_forward_change,
    port_forward_create,
    port_forward_delete,
    port_forwards_release,
    public_ipv4_release,
)
from apps.network.services.helpers import (
    InvalidMac,
    building_subnet,
    device_ipv6,
    mac_clean,
    public_ipv4_allocate,
    room_ipv6_prefix_next,
)
from apps.network.services.policy import blocked_port_text, policy_object_delete, policy_object_save

__all__ = [
    "FORWARD_USABLE_STATUSES",
    "InvalidMac",
    "_device_delete",
    "blocked_port_text",
    "building_subnet",
    "device_add",
    "device_change",
    "device_ipv6",
    "device_remove",
    "devices_readdress",
    "forward_conflict_message",
    "ipv6_opening_change",
    "ipv6_opening_create",
    "ipv6_opening_delete",
    "mac_clean",
    "member_can_forward",
    "opening_conflict_message",
    "policy_object_delete",
    "policy_object_save",
    "port_forward_change",
    "port_forward_create",
    "port_forward_delete",
    "port_forwards_release",
    "public_ipv4_allocate",
    "public_ipv4_release",
    "room_ipv6_prefix_next",
    "room_require_subnet",
    "subnet_create",
]
