"""Refusals of the network services; each carries a message a volunteer can act on."""

from __future__ import annotations

# The base refusal and the membership's own live below this app (core, members); imported from
# here too, as everywhere before they moved.
from apps.core.errors import NetworkError
from apps.members.errors import MemberStateError

__all__ = [
    "DeviceLimitReached",
    "DeviceNameInUse",
    "DeviceNotUsable",
    "Ipv6OpeningConflict",
    "LimitReached",
    "MacInUse",
    "MemberStateError",
    "NetworkError",
    "NoSubnet",
    "PoolExhausted",
    "PortForwardConflict",
    "PortRangeInvalid",
    "QuarantineFull",
    "SubnetExhausted",
]


class PoolExhausted(NetworkError):
    """No public IPv4 address is left in any active pool."""


class QuarantineFull(NetworkError):
    """Every free public IPv4 address is still in quarantine."""


class SubnetExhausted(NetworkError):
    """The building's private subnet has no free address left."""


class NoSubnet(NetworkError):
    """The room's building has no private IPv4 subnet (or no IPv6 prefix where one is needed)."""


class DeviceLimitReached(NetworkError):
    field = "name"


class MacInUse(NetworkError):
    field = "mac"


class DeviceNameInUse(NetworkError):
    field = "name"


class PortForwardConflict(NetworkError):
    """The ports overlap another forward on the same public address and protocol."""

    field = "public_ports"


class PortRangeInvalid(NetworkError):
    """A port or range that cannot be used (unequal lengths, blocked by the policy, ...)."""

    field = "public_ports"


class DeviceNotUsable(NetworkError):
    """Someone else's device, or a device whose membership cannot use it now."""

    field = "device"


class LimitReached(NetworkError):
    """The member has as many forwards (or openings) as the policy allows."""


class Ipv6OpeningConflict(NetworkError):
    """The ports overlap another opening of the same device."""

    field = "ports"
