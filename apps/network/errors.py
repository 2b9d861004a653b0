"""Refusals of the network services; each carries a message a volunteer can act on."""

from __future__ import annotations


class NetworkError(Exception):
    """A refused change; nothing was written. `field` names the form field it belongs to."""

    field: str | None = None

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if field is not None:
            self.field = field

    def __str__(self) -> str:
        return str(self.message)


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


class MemberStateError(NetworkError):
    """The action does not fit the membership's status."""


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
