"""The lab snapshot: who lives in pl-cdorm and what the firewall should let through."""

from __future__ import annotations

from workers.ruleset import snapshot as s

# Member 1: device 10 with a forward public tcp 8080 -> 80, tcp 7007 -> 7007 and an IPv6 opening.
# Member 2: device 20, shaped to 2 Mbit/s down, 1 Mbit/s up.
# Member 3: device 30, no public IPv4: not spoofing, but no Internet over IPv4 (no NAT); IPv6 works.
# 10.100.0.99 / 2001:db8:100:1::99 sit on the dorm interface but belong to nobody (spoofing).
DEV1_V4, DEV1_V6 = "10.100.0.10", "2001:db8:100:1::10"
DEV2_V4, DEV2_V6 = "10.100.0.20", "2001:db8:100:1::20"
DEV3_V4, DEV3_V6 = "10.100.0.30", "2001:db8:100:1::30"
SPOOF_V4, SPOOF_V6 = "10.100.0.99", "2001:db8:100:1::99"
PUB1, PUB2 = "198.51.100.5", "198.51.100.6"
INET_V4, INET_V6 = "203.0.113.10", "2001:db8:ffff::10"
SHAPED_KBIT = 2000
DORM_ADDRESSES = [f"{a}/16" for a in (DEV1_V4, DEV2_V4, DEV3_V4, SPOOF_V4)] + [
    f"{a}/64" for a in (DEV1_V6, DEV2_V6, DEV3_V6, SPOOF_V6)
]

HOST = s.Host(
    name="pl-cfw",
    uplink_interfaces=("pl-cfwu",),
    member_interfaces=("pl-cfwd",),
    link_kbit=1_000_000,
    private_networks=("10.100.0.0/16",),
    public_networks=("198.51.100.0/24",),
)
POLICY = s.Policy(management_networks=("10.255.255.0/24",), blocked_outbound=(("tcp", 25),))


def lab_members(extra_forward: bool = False) -> tuple[s.Member, ...]:
    forwards = [
        s.PortForward(1, "tcp", 8080, 10, 80, description="web"),
        s.PortForward(2, "tcp", 7007, 10, 7007),
        s.PortForward(3, "udp", (6000, 6009), 10, (6000, 6009)),
    ]
    if extra_forward:
        forwards.append(s.PortForward(4, "tcp", 8081, 10, 81))
    m1 = s.Member(
        id=1,
        public_ipv4=PUB1,
        devices=(s.Device(id=10, ipv4=DEV1_V4, ipv6=(DEV1_V6,)),),
        forwards=tuple(forwards),
        openings=(s.Opening(1, 10, "tcp", 2222), s.Opening(2, 10, "udp", (5000, 5010))),
    )
    m2 = s.Member(
        id=2,
        public_ipv4=PUB2,
        devices=(s.Device(id=20, ipv4=DEV2_V4, ipv6=(DEV2_V6,)),),
        shaping=s.Shaping(down_kbit=SHAPED_KBIT, up_kbit=1000),
    )
    m3 = s.Member(id=3, public_ipv4=None, devices=(s.Device(id=30, ipv4=DEV3_V4, ipv6=(DEV3_V6,)),))
    return (m1, m2, m3)


def lab_snapshot(extra_forward: bool = False, host: s.Host = HOST) -> s.Snapshot:
    return s.Snapshot(policy=POLICY, host=host, members=lab_members(extra_forward))
