"""Plain `make_snapshot(...)` builders for the compiler tests (no Django, no factories)."""

from __future__ import annotations

from workers.ruleset import snapshot as s

HOST = s.Host(
    name="pl-cfw",
    uplink_interfaces=("pl-cfwu",),
    member_interfaces=("pl-cfwd",),
    private_networks=("10.100.0.0/16",),
    public_networks=("198.51.100.0/24",),
)
POLICY = s.Policy(
    management_networks=("10.255.255.0/24", "2001:db8:ff00::/56"),
    blocked_outbound=(("tcp", 25),),
    blocked_inbound=(("both", (135, 139)), ("tcp", 445)),
)


def make_member(
    mid: int = 1,
    *,
    public: str | None = "198.51.100.5",
    devices: tuple[s.Device, ...] | None = None,
    forwards: tuple[s.PortForward, ...] = (),
    openings: tuple[s.Opening, ...] = (),
    shaping: s.Shaping | None = None,
) -> s.Member:
    """A member with one device 10.100.0.<mid+9> / 2001:db8:100:1::<mid+9> unless told otherwise."""
    if devices is None:
        devices = (
            s.Device(
                id=mid * 10, ipv4=f"10.100.0.{mid + 9}", ipv6=(f"2001:db8:100:1::{mid + 9:x}",)
            ),
        )
    return s.Member(
        id=mid,
        public_ipv4=public,
        devices=devices,
        forwards=forwards,
        openings=openings,
        shaping=shaping,
    )


def make_small_members() -> tuple[s.Member, ...]:
    """The small, hand-written members of the golden file: every feature at least once."""
    m1 = s.Member(
        id=1,
        public_ipv4="198.51.100.5",
        devices=(
            s.Device(id=10, ipv4="10.100.0.10", ipv6=("2001:db8:100:1::10",)),
            s.Device(
                id=11, ipv4="10.100.0.11", ipv6=("2001:db8:100:1::11", "2001:db8:100:1::1:11")
            ),
        ),
        forwards=(
            s.PortForward(1, "tcp", 8080, 10, 80, description='web "quoted" }; drop'),
            s.PortForward(2, "both", 3074, 11, 3074),
            s.PortForward(3, "udp", (27000, 27010), 11, (27000, 27010)),
            s.PortForward(4, "tcp", (2200, 2202), 10, (22, 24)),
            s.PortForward(5, "tcp", 9999, 10, 9999, enabled=False),
        ),
        openings=(
            s.Opening(1, 10, "tcp", 2222, description="ssh\nrm -rf"),
            s.Opening(2, 10, "udp", (60000, 60010)),
            s.Opening(3, 11, "both", None),
        ),
        ipv6_prefixes=("2001:db8:100:1::/64",),
    )
    m2 = s.Member(
        id=2,
        public_ipv4="198.51.100.6",
        devices=(s.Device(id=20, ipv4="10.100.0.20", ipv6=("2001:db8:100:2::20",)),),
        shaping=s.Shaping(down_kbit=2000, up_kbit=1000),
    )
    m3 = s.Member(id=3, public_ipv4=None, devices=(s.Device(id=30, ipv4="10.100.0.30"),))
    return (m2, m3, m1)  # deliberately unsorted: the snapshot sorts


def make_snapshot(
    members: tuple[s.Member, ...] | None = None, **host_changes: object
) -> s.Snapshot:
    """A snapshot for HOST and POLICY; `host_changes` override Host fields."""
    host = HOST
    if host_changes:
        fields = {f: getattr(HOST, f) for f in HOST.__dataclass_fields__}
        fields.update(host_changes)
        host = s.Host(**fields)  # type: ignore[arg-type]
    return s.Snapshot(
        policy=POLICY, host=host, members=make_small_members() if members is None else members
    )
