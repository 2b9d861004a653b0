"""Every refusal of the snapshot constructors, each naming the offending object."""

from __future__ import annotations

import copy
import ipaddress

import pytest

from tests.unit.ruleset.builders import HOST, POLICY, make_member, make_snapshot
from workers.ruleset import snapshot as s
from workers.ruleset import values
from workers.ruleset.snapshot import SnapshotError

DEV = s.Device(id=10, ipv4="10.100.0.10", ipv6=("2001:db8:100:1::10",))


def fwd(
    fid: int = 1, proto: str = "tcp", public: object = 8080, target: object = 80, dev: int = 10
) -> s.PortForward:
    return s.PortForward(fid, proto, public, dev, target)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: s.PortRange(0, 0), "0 is outside 1..65535"),
        (lambda: s.PortRange(1, 65536), "65536 is outside 1..65535"),
        (lambda: s.PortRange(10, 9), "first port after last"),
        (lambda: s.PortRange(True, 2), "is not an integer"),  # type: ignore[arg-type]
        (lambda: fwd(public=0), "port forward #1 public ports"),
        (lambda: fwd(public=70000), "port forward #1 public ports"),
        (
            lambda: fwd(target="80-81"),
            "port forward #1: public ports 8080 and target ports 80-81 have unequal lengths",
        ),
        (lambda: fwd(proto="icmp"), "port forward #1: protocol 'icmp'"),
        (lambda: fwd(public="80; drop"), "port forward #1 public ports: '80; drop' is not a port"),
        (lambda: s.PortForward(1, "tcp", 80, 10, 80, enabled="yes"), "port forward #1 enabled"),  # type: ignore[arg-type]
        (lambda: s.PortForward(0, "tcp", 80, 10, 80), "port forward id"),
        (lambda: s.Opening(7, 10, "tcp", 0), "IPv6 opening #7 ports"),
        (lambda: s.Opening(7, 10, "sctp", 22), "IPv6 opening #7: protocol 'sctp'"),
        (
            lambda: s.Device(id=5, ipv4="2001:db8::1"),
            "device #5 ipv4: '2001:db8::1' is not an IPv4 address",
        ),
        (
            lambda: s.Device(id=5, ipv6=("10.0.0.1",)),
            "device #5 ipv6: '10.0.0.1' is not an IPv6 address",
        ),
        (
            lambda: s.Device(id=5, ipv4="10.0.0.300"),
            "device #5 ipv4: '10.0.0.300' is not an IP address",
        ),
        (lambda: s.Device(id=-1), "device id"),
        (
            lambda: make_member(public="2001:db8::5"),
            "member #1 public_ipv4: '2001:db8::5' is not an IPv4 address",
        ),
        (lambda: s.Shaping(down_kbit=0, up_kbit=100), "shaping down_kbit"),
        (
            lambda: make_member(
                forwards=(fwd(1, "tcp", (8000, 8010), (8000, 8010)), fwd(2, "both", 8005, 80))
            ),
            "port forward #2 of member #1: public tcp ports 8005 overlap port forward #1",
        ),
        (
            lambda: make_member(forwards=(fwd(1, "udp", 53, 53), fwd(2, "udp", 53, 5353))),
            "port forward #2 of member #1: public udp ports 53 overlap port forward #1",
        ),
        (
            lambda: make_member(forwards=(fwd(dev=99),)),
            "port forward #1 of member #1: device #99 is not the member's",
        ),
        (
            lambda: make_member(
                devices=(s.Device(id=10, ipv6=("2001:db8:100:1::10",)),), forwards=(fwd(),)
            ),
            "port forward #1 of member #1: device #10 has no IPv4",
        ),
        (
            lambda: make_member(public=None, forwards=(fwd(),)),
            "member #1: has enabled port forwards but no public IPv4",
        ),
        (
            lambda: make_member(openings=(s.Opening(3, 99, "tcp", 22),)),
            "IPv6 opening #3 of member #1: device #99",
        ),
        (lambda: make_member(devices=(DEV, DEV)), "member #1: device #10 appears twice"),
        (
            lambda: s.Member(id=1, devices=(DEV,), ipv6_prefixes=("2001:db8:100:2::/64",)),
            "device #10 of member #1: ipv6 2001:db8:100:1::10 is outside the member's prefixes",
        ),
        (
            lambda: s.Member(id=1, ipv6_prefixes=("10.0.0.0/8",)),
            "is not an IPv6 network (address family mismatch)",
        ),
        (lambda: s.Member(id=1, ipv6_prefixes=("2001:db8::1/64",)), "is not a network"),
        (
            lambda: s.Host(name="fw 1", uplink_interfaces=("a",), member_interfaces=("b",)),
            "host 'fw 1': name",
        ),
        (
            lambda: s.Host(name="fw", uplink_interfaces=('a"b',), member_interfaces=("b",)),
            "host fw uplink: interface name",
        ),
        (
            lambda: s.Host(
                name="fw", uplink_interfaces=("a-very-long-name0",), member_interfaces=("b",)
            ),
            "interface name 'a-very-long-name0'",
        ),
        (
            lambda: s.Host(name="fw", uplink_interfaces=(), member_interfaces=("b",)),
            "host fw: needs at least one",
        ),
        (
            lambda: s.Host(name="fw", uplink_interfaces=("a",), member_interfaces=("a",)),
            "interface a is both",
        ),
        (
            lambda: s.Host(
                name="fw", uplink_interfaces=("a",), member_interfaces=("b",), tx_queues=4
            ),
            "host fw: tx_queues > 1 needs shaping_root mq",
        ),
        (
            lambda: s.Host(
                name="fw", uplink_interfaces=("a",), member_interfaces=("b",), shaping_root="cake"
            ),
            "host fw: shaping root 'cake'",
        ),
        (
            lambda: s.Host(
                name="fw",
                uplink_interfaces=("a",),
                member_interfaces=("b",),
                private_networks=("2001:db8::/32",),
            ),
            "host fw private networks: 2001:db8::/32 is not an IPv4 network",
        ),
        (lambda: s.Policy(blocked_outbound=(("tcp", 0),)), "policy blocked outbound: port rule"),
        (
            lambda: s.Policy(blocked_inbound=(("gre", 1),)),
            "policy blocked inbound: port rule: protocol 'gre'",
        ),
        (lambda: s.Policy(management_networks=("10.0.0.1/8",)), "policy management networks"),
        (
            lambda: make_snapshot((make_member(1), make_member(1, public="198.51.100.9"))),
            "member #1 appears twice",
        ),
        (
            lambda: make_snapshot((make_member(1), make_member(2))),
            "member #2: public_ipv4 198.51.100.5 is also member #1's",
        ),
        (
            lambda: make_snapshot(
                (make_member(1), make_member(2, public="198.51.100.9", devices=(DEV,)))
            ),
            "device #10 belongs to member #1 and member #2",
        ),
        (
            lambda: make_snapshot(
                (
                    make_member(1),
                    make_member(
                        2, public="198.51.100.9", devices=(s.Device(id=20, ipv4="10.100.0.10"),)
                    ),
                )
            ),
            "device #20 of member #2: ipv4 10.100.0.10 is also device #10's",
        ),
        (
            lambda: make_snapshot(
                (
                    make_member(1),
                    make_member(
                        2,
                        public="198.51.100.9",
                        devices=(s.Device(id=20, ipv6=("2001:db8:100:1::a",)),),
                    ),
                )
            ),
            "device #20 of member #2: ipv6 2001:db8:100:1::a is also device #10's",
        ),
        (
            lambda: make_snapshot(
                (make_member(1, devices=(s.Device(id=10, ipv4="192.168.1.1"),)),)
            ),
            "device #10 of member #1: ipv4 192.168.1.1 is outside the host's private networks",
        ),
        (
            lambda: make_snapshot((make_member(1, public="203.0.113.7"),)),
            "outside the host's public networks",
        ),
        (
            lambda: s.Snapshot(policy=POLICY, host=HOST, members=("x",)),
            "snapshot: 'x' is not a Member",
        ),  # type: ignore[arg-type]
        (lambda: s.Snapshot(policy=None, host=HOST), "snapshot: policy is not a Policy"),  # type: ignore[arg-type]
    ],
)
def test_snapshot_refuses_bad_input(build: object, message: str) -> None:
    with pytest.raises(SnapshotError, match=None) as info:
        build()  # type: ignore[operator]
    assert message in str(info.value)


def test_snapshot_error_is_a_value_error() -> None:
    assert issubclass(SnapshotError, ValueError)


def test_constructors_normalise_convenient_spellings() -> None:
    f = s.PortForward(1, "tcp", "1000-1010", 10, (2000, 2010))
    assert f.protocol is s.Protocol.TCP
    assert f.public_ports == s.PortRange(1000, 1010)
    assert f.target_ports.size == 11
    d = s.Device(id=3, ipv4="10.0.0.1", ipv6=("2001:db8::2", "2001:db8::1", "2001:db8::2"))
    assert d.ipv4 == ipaddress.IPv4Address("10.0.0.1")
    assert d.ipv6 == (ipaddress.IPv6Address("2001:db8::1"), ipaddress.IPv6Address("2001:db8::2"))


def test_disabled_forwards_may_overlap_and_need_no_address() -> None:
    m = make_member(public=None, forwards=(s.PortForward(1, "tcp", 80, 10, 80, enabled=False),))
    assert not m.forwards[0].enabled


def test_snapshot_sorts_members_and_children() -> None:
    m = make_member(1, forwards=(fwd(2, public=81), fwd(1, public=80)))
    assert [f.id for f in m.forwards] == [1, 2]
    snap = make_snapshot(
        (make_member(2, public="198.51.100.9", devices=()), make_member(1, devices=()))
    )
    assert [x.id for x in snap.members] == [1, 2]


def test_snapshot_is_frozen() -> None:
    with pytest.raises(AttributeError):
        DEV.ipv4 = None  # type: ignore[misc]


def test_the_global_check_of_a_changed_member_still_sees_the_unchanged_ones() -> None:
    """The check is incremental (members that are the very objects of the last snapshot are
    not checked again): a conflict between a changed member and an unchanged one, a device that
    moves between members, and a member that leaves and frees its address are all seen."""
    one = make_member(1)
    two = make_member(2, public="198.51.100.9", devices=(s.Device(id=20, ipv4="10.100.0.20"),))
    make_snapshot((one, two))
    clash = make_member(2, public="198.51.100.9", devices=(s.Device(id=20, ipv4="10.100.0.10"),))
    with pytest.raises(SnapshotError, match=r"ipv4 10\.100\.0\.10 is also device #10's"):
        make_snapshot((one, clash))
    with pytest.raises(SnapshotError, match=r"public_ipv4 198\.51\.100\.5 is also member #1's"):
        make_snapshot((one, make_member(2, devices=(s.Device(id=20, ipv4="10.100.0.20"),))))
    make_snapshot((one, two))  # after a refusal: checked from nothing, and fine
    # Member 1 leaves: its address and its device are free for member 2 in the same snapshot.
    taken = make_member(2, public="198.51.100.5", devices=(DEV,))
    make_snapshot((taken,))
    make_snapshot((one, two))
    # The device moves from member 1 to member 2, both changed in one snapshot.
    moved = make_member(2, public="198.51.100.9", devices=(DEV,))
    make_snapshot((make_member(1, devices=()), moved))


@pytest.mark.parametrize(
    "text", ["10.100.0.5", "0.0.0.1", "255.255.255.255", "2001:db8::1", "::ffff:10.0.0.1", "::"]
)
def test_fast_parsed_addresses_equal_what_ipaddress_makes(text: str) -> None:
    # The readers' fast path builds address objects without their __init__: they must be
    # indistinguishable from ipaddress's own (equality, hash, text, order, copies).
    parse = values._parse4 if "." in text and ":" not in text else values._parse6
    fast, slow = parse(text), ipaddress.ip_address(text)
    assert type(fast) is type(slow)
    assert fast == slow
    assert hash(fast) == hash(slow)
    assert str(fast) == str(slow)
    assert repr(fast) == repr(slow)
    assert not fast < slow
    assert not slow < fast
    assert copy.deepcopy(fast) == slow  # through __reduce__, as pickle does
    if isinstance(slow, ipaddress.IPv6Address):
        assert fast.scope_id is None
        assert fast.ipv4_mapped == slow.ipv4_mapped


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: s.Device(1, "010.0.0.1"), "device #1 ipv4"),
        (lambda: s.Device(1, "10.0.0.1/32"), "device #1 ipv4"),
        (lambda: s.Device(1, "2001:db8::1"), "address family mismatch"),
        (lambda: s.Device(1, None, ("fe80::1%eth0",)), "scope id"),
        (lambda: s.Device(1, None, ("10.0.0.1",)), "address family mismatch"),
        (lambda: make_member(3, public="2001:db8::1"), "member #3 public_ipv4"),
        (
            lambda: s.Member(3, ipv6_prefixes=("2001:db8:100:1::1/64",)),
            "member #3 ipv6 prefixes",
        ),
        (lambda: s.Member(3, ipv6_prefixes=("10.0.0.0/8",)), "member #3 ipv6 prefixes"),
        (lambda: s.PortForward(7, "icmp", 80, 1, 80), "port forward #7"),
        (lambda: s.Opening(8, 1, "sctp"), "IPv6 opening #8"),
    ],
)
def test_fast_paths_still_name_what_they_refuse(build: object, message: str) -> None:
    with pytest.raises(SnapshotError, match=message):
        build()  # type: ignore[operator]


def test_a_room_prefix_given_as_text_is_a_network() -> None:
    member = s.Member(3, ipv6_prefixes=("2001:db8:100:1::/64",))
    assert member.ipv6_prefixes == (ipaddress.IPv6Network("2001:db8:100:1::/64"),)
