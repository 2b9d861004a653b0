"""Hypothesis strategies for valid snapshots (shared by the unit and the kernel tests)."""

from __future__ import annotations

import ipaddress

from hypothesis import strategies as st

from workers.ruleset import snapshot as s

HOST = s.Host(
    name="pl-cfw",
    uplink_interfaces=("pl-cfwu",),
    member_interfaces=("pl-cfwd",),
    link_kbit=1_000_000,
    private_networks=("10.100.0.0/16",),
    public_networks=("198.51.100.0/24",),
)
V6_BASE = int(ipaddress.IPv6Address("2001:db8:100::"))
TEXT = st.text(max_size=12)  # descriptions: any text, never rendered


@st.composite
def members(draw: st.DrawFn, n: int) -> list[s.Member]:
    """`n` members with unique ids and addresses; some share a /64, some lack a public IPv4."""
    ids = draw(st.lists(st.integers(1, 70000), min_size=n, max_size=n, unique=True))
    v4 = iter(draw(st.lists(st.integers(2, 65000), min_size=3 * n, max_size=3 * n, unique=True)))
    pubs = iter(draw(st.lists(st.integers(1, 254), min_size=n, max_size=n, unique=True)))
    used_v6: set[int] = set()  # no address belongs to two devices
    out = []
    for k, mid in enumerate(ids):
        room = draw(st.sampled_from([k + 1, 1]))  # /64 of its own, or the shared room 1
        prefix = V6_BASE + (room << 64)
        devices = []
        for j in range(draw(st.integers(1, 3))):
            a4 = ipaddress.IPv4Address(int(ipaddress.IPv4Address("10.100.0.0")) + next(v4))
            v6 = [
                prefix + x
                for x in draw(st.lists(st.integers(1, 2**64 - 1), max_size=2, unique=True))
                if prefix + x not in used_v6
            ]
            used_v6.update(v6)
            devices.append(
                s.Device(
                    id=mid * 10 + j,
                    ipv4=a4 if draw(st.integers(0, 9)) else None,
                    ipv6=tuple(ipaddress.IPv6Address(x) for x in v6),
                )
            )
        with_v4 = [d for d in devices if d.ipv4 is not None]
        public = draw(st.booleans()) or draw(st.booleans())  # 3 in 4 have one
        forwards: list[s.PortForward] = []
        taken: dict[str, list[s.PortRange]] = {"tcp": [], "udp": []}
        for f in range(draw(st.integers(0, 5))):
            proto = draw(st.sampled_from(list(s.Protocol)))
            first = draw(st.integers(1, 65535))
            last = min(first + draw(st.integers(1, 20)) - 1, 65535)
            pr = s.PortRange(first, last)
            enabled = public and bool(with_v4) and draw(st.booleans())
            if enabled and any(pr.overlaps(o) for p in proto.l4 for o in taken[p]):
                continue
            tfirst = draw(st.sampled_from([first, max(1, min(first + 7, 65535 - (last - first)))]))
            target = s.PortRange(tfirst, tfirst + last - first)
            if enabled:
                for p in proto.l4:
                    taken[p].append(pr)
            dev = draw(st.sampled_from(with_v4 if enabled else devices))
            forwards.append(
                s.PortForward(f + 1, proto, pr, dev.id, target, enabled, description=draw(TEXT))
            )
        openings = []
        for o in range(draw(st.integers(0, 4))):
            dev = draw(st.sampled_from(devices))
            ports = draw(st.none() | st.tuples(st.integers(1, 65535), st.integers(0, 30)))
            rng = None if ports is None else s.PortRange(ports[0], min(65535, ports[0] + ports[1]))
            openings.append(
                s.Opening(
                    o + 1,
                    dev.id,
                    draw(st.sampled_from(list(s.Protocol))),
                    rng,
                    description=draw(TEXT),
                )
            )
        shaping = draw(
            st.none() | st.builds(s.Shaping, st.integers(8, 10**7), st.integers(8, 10**7))
        )
        prefixes = (ipaddress.IPv6Network((prefix, 64)),) if draw(st.booleans()) else ()
        out.append(
            s.Member(
                id=mid,
                public_ipv4=f"198.51.100.{next(pubs)}" if public else None,
                devices=tuple(devices),
                forwards=tuple(forwards),
                openings=tuple(openings),
                shaping=shaping,
                ipv6_prefixes=prefixes,
            )
        )
    return out


def policies() -> st.SearchStrategy[s.Policy]:
    return st.builds(
        s.Policy,
        management_networks=st.sampled_from(
            [(), ("10.255.255.0/24", "10.255.255.0/28"), ("2001:db8:ff00::/56",)]
        ),
        blocked_outbound=st.lists(
            st.tuples(st.sampled_from(["tcp", "udp", "both"]), st.integers(1, 200)), max_size=4
        ),
        blocked_inbound=st.lists(
            st.tuples(
                st.sampled_from(["tcp", "udp", "both"]),
                st.tuples(st.integers(100, 140), st.integers(140, 200)),
            ),
            max_size=3,
        ),
        inbound_icmpv6_echo=st.booleans(),
        syn_proxy=st.booleans(),
    )


def hosts() -> st.SearchStrategy[s.Host]:
    mq = st.builds(
        lambda q: s.Host(
            name="pl-cfw",
            uplink_interfaces=("pl-cfwu",),
            member_interfaces=("pl-cfwd",),
            shaping_root="mq",
            tx_queues=q,
        ),
        st.integers(1, 4),
    )
    return st.just(HOST) | mq


@st.composite
def snapshots(draw: st.DrawFn, host: s.Host | None = None, max_members: int = 6) -> s.Snapshot:
    """A random valid snapshot (on `host` when given)."""
    n = draw(st.integers(0, max_members))
    return s.Snapshot(
        policy=draw(policies()),
        host=host or draw(hosts()),
        members=tuple(draw(members(n))),
    )
