"""Synthetic snapshots for benchmarks and tests (documentation ranges only).

`synthetic_snapshot(20_000)` gives the design target: 20,000 members with a public IPv4 from
198.18.0.0/15 (the benchmarking range), 3 devices each (private 10.0.0.0/8, one IPv6 address in
the member's /64 of 2001:db8:100::/48 ... wrapping into 2001:db8:101:: and up beyond 65,536),
5 forwards each (tcp, udp, both, a shifted port and, for every tenth member, an equal range),
one IPv6 opening each (an "all ports" device for every 50th) and every fourth member shaped
(5,000 of 20,000).
"""

from __future__ import annotations

import ipaddress

from workers.ruleset.snapshot import (
    Device,
    Host,
    Member,
    Opening,
    Policy,
    PortForward,
    PortRange,
    PortRule,
    Protocol,
    Shaping,
    Snapshot,
)

PUBLIC_BASE = int(ipaddress.IPv4Address("198.18.0.0"))
PRIVATE_BASE = int(ipaddress.IPv4Address("10.0.0.0"))
IPV6_BASE = int(ipaddress.IPv6Address("2001:db8:100::"))


def synthetic_host(name: str = "bench") -> Host:
    """A host with one uplink and one member-side interface."""
    return Host(name=name, uplink_interfaces=("pl-up",), member_interfaces=("pl-dorm",))


def synthetic_policy() -> Policy:
    """Management network of the lab, port 25 blocked outbound, NetBIOS blocked inbound."""
    return Policy(
        management_networks=(ipaddress.ip_network("10.255.255.0/24"),),
        blocked_outbound=(PortRule(Protocol.TCP, PortRange(25, 25)),),
        blocked_inbound=(PortRule(Protocol.BOTH, PortRange(135, 139)),),
    )


def synthetic_member(i: int) -> Member:
    """Member number i (0-based): id i + 1, devices 3i+1..3i+3, forwards 5i+1..5i+5."""
    mid = i + 1
    pub = ipaddress.IPv4Address(PUBLIC_BASE + i)
    prefix = IPV6_BASE + (i << 64)
    devices = tuple(
        Device(
            id=3 * i + k + 1,
            ipv4=ipaddress.IPv4Address(PRIVATE_BASE + 256 + 3 * i + k),
            ipv6=(ipaddress.IPv6Address(prefix + k + 1),),
        )
        for k in range(3)
    )
    d0, d1, d2 = (d.id for d in devices)
    fid = 5 * i
    forwards = [
        PortForward(
            fid + 1, Protocol.TCP, PortRange(80, 80), d0, PortRange(80, 80), description="web"
        ),
        PortForward(fid + 2, Protocol.TCP, PortRange(2222, 2222), d1, PortRange(22, 22)),
        PortForward(fid + 3, Protocol.UDP, PortRange(27015, 27015), d2, PortRange(27015, 27015)),
        PortForward(fid + 4, Protocol.BOTH, PortRange(3074, 3074), d2, PortRange(3074, 3074)),
    ]
    if i % 10 == 0:
        forwards.append(
            PortForward(fid + 5, Protocol.TCP, PortRange(6881, 6889), d0, PortRange(6881, 6889))
        )
    else:
        forwards.append(
            PortForward(fid + 5, Protocol.UDP, PortRange(5000, 5000), d1, PortRange(5001, 5001))
        )
    if i % 50 == 0:
        openings = (Opening(i + 1, d2, Protocol.BOTH, None),)
    else:
        openings = (Opening(i + 1, d0, Protocol.TCP, PortRange(22, 22)),)
    shaping = Shaping(down_kbit=16_000, up_kbit=4_000) if i % 4 == 0 else None
    return Member(
        id=mid,
        public_ipv4=pub,
        devices=devices,
        forwards=tuple(forwards),
        openings=openings,
        shaping=shaping,
    )


def synthetic_snapshot(members: int = 20_000, host: Host | None = None) -> Snapshot:
    """A snapshot of `members` synthetic members (up to 131,072 by the public range)."""
    return Snapshot(
        policy=synthetic_policy(),
        host=host or synthetic_host(),
        members=tuple(synthetic_member(i) for i in range(members)),
    )
