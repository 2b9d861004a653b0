"""Kernel-level checks: full vs incremental state, nft -c on generated snapshots, mq roots."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.ruleset import topology as t
from tests.e2e.ruleset.scenario import HOST, POLICY, lab_members, lab_snapshot
from workers.ruleset import compile_snapshot, diff
from workers.ruleset import snapshot as s
from workers.ruleset.synthetic import synthetic_member

pytestmark = pytest.mark.lab


def kernel_state(ns: str) -> tuple[object, object, object]:
    return t.normalised_ruleset(ns), t.tc_classes(ns, "pl-cfwd"), t.tc_classes(ns, "pl-cfwu")


def changed_members() -> tuple[s.Member, ...]:
    """Every kind of element change against lab_members(): forwards, openings, shaping, devices."""
    m1, m2 = lab_members()
    m1 = s.Member(
        id=1,
        public_ipv4=m1.public_ipv4,
        devices=(*m1.devices, s.Device(id=11, ipv4="10.100.0.11", ipv6=("2001:db8:100:1::11",))),
        forwards=(
            s.PortForward(1, "tcp", 8080, 11, 8080),  # same key, new value
            s.PortForward(3, "udp", (6000, 6019), 10, (6000, 6019)),  # range changed
            s.PortForward(5, "both", (7100, 7102), 11, (7200, 7202)),  # shifted range
        ),
        openings=(s.Opening(2, 10, "udp", (5000, 5020)), s.Opening(3, 11, "both", None)),
        shaping=s.Shaping(5000, 2000),
    )
    m2 = s.Member(
        id=2, public_ipv4=m2.public_ipv4, devices=m2.devices, shaping=s.Shaping(3000, 1000)
    )
    m3 = s.Member(id=3, public_ipv4="198.51.100.7", devices=(s.Device(id=30, ipv4="10.100.0.30"),))
    return (m1, m2, m3)


def test_full_and_incremental_leave_identical_kernel_state(scratch_ns: str) -> None:
    old = compile_snapshot(lab_snapshot())
    new = compile_snapshot(s.Snapshot(policy=POLICY, host=HOST, members=changed_members()))
    step = diff(old, new)
    assert step is not None
    assert step.added
    assert step.deleted
    assert step.classes_changed

    t.load(scratch_ns, old.nft, old.tc)
    t.load(scratch_ns, step.nft, step.tc)  # the incremental path: tc first, then nft
    incremental = kernel_state(scratch_ns)

    t.load(scratch_ns, new.nft, new.tc)  # the full path over the same namespace
    full = kernel_state(scratch_ns)
    assert incremental == full

    t.run("nft", "delete", "table", "inet", "portal_fw", ns=scratch_ns)  # and from nothing at all
    t.load(scratch_ns, new.nft, new.tc)
    assert kernel_state(scratch_ns) == full
    assert f"sha256:{new.content_hash}" in t.run(
        "nft", "list", "set", "inet", "portal_fw", "version", ns=scratch_ns
    )


def test_full_load_leaves_other_tables_alone(scratch_ns: str) -> None:
    t.run("nft", "add", "table", "inet", "mgmt", ns=scratch_ns)
    t.run(
        "nft",
        "add",
        "set",
        "inet",
        "mgmt",
        "keep",
        "{ type ipv4_addr; elements = { 10.255.255.1 } }",
        ns=scratch_ns,
    )
    compiled = compile_snapshot(lab_snapshot())
    t.load(scratch_ns, compiled.nft, compiled.tc)
    t.load(scratch_ns, compiled.nft, compiled.tc)
    assert "10.255.255.1" in t.run("nft", "list", "set", "inet", "mgmt", "keep", ns=scratch_ns)


def test_mq_root_with_one_htb_per_queue_loads(scratch_ns: str) -> None:
    host = s.Host(
        name="pl-cfw",
        uplink_interfaces=("pl-cfwu",),
        member_interfaces=("pl-cfwd",),
        shaping_root="mq",
        tx_queues=4,
    )
    members = tuple(synthetic_member(i) for i in range(0, 40))
    snap = s.Snapshot(policy=POLICY, host=host, members=members)
    compiled = compile_snapshot(snap)
    t.load(scratch_ns, compiled.nft, compiled.tc)
    qdiscs = t.run("tc", "qdisc", "show", "dev", "pl-cfwd", ns=scratch_ns)
    assert "qdisc mq 1: root" in qdiscs
    assert qdiscs.count("qdisc htb") == 4
    classes = t.tc_classes(scratch_ns, "pl-cfwd")
    assert len(classes) == 4 + 10  # a default class per queue, 10 shaped members
    assert {c.split()[2].split(":")[0] for c in classes} == {"100", "101", "102", "103"}


# ---------------------------------------------------------------- generated snapshots pass nft -c


@st.composite
def snapshots(draw: st.DrawFn) -> s.Snapshot:
    n = draw(st.integers(0, 6))
    ids = draw(st.lists(st.integers(1, 70000), min_size=n, max_size=n, unique=True))
    v4 = iter(draw(st.lists(st.integers(2, 65000), min_size=3 * n, max_size=3 * n, unique=True)))
    pubs = iter(draw(st.lists(st.integers(1, 254), min_size=n, max_size=n, unique=True)))
    members = []
    for k, mid in enumerate(ids):
        devices = []
        used_v6: set[int] = set()  # two devices of one member never share an address
        for j in range(draw(st.integers(1, 3))):
            a4 = ipaddress.IPv4Address(int(ipaddress.IPv4Address("10.100.0.0")) + next(v4))
            v6 = [
                x
                for x in draw(st.lists(st.integers(1, 2**64 - 1), max_size=2, unique=True))
                if x not in used_v6
            ]
            used_v6.update(v6)
            prefix = int(ipaddress.IPv6Address("2001:db8:100::")) + ((k + 1) << 64)
            devices.append(
                s.Device(
                    id=mid * 10 + j,
                    ipv4=a4,
                    ipv6=tuple(ipaddress.IPv6Address(prefix + x) for x in v6),
                )
            )
        forwards: list[s.PortForward] = []
        taken: dict[str, list[s.PortRange]] = {"tcp": [], "udp": []}
        for f in range(draw(st.integers(0, 5))):
            proto = draw(st.sampled_from(list(s.Protocol)))
            first = draw(st.integers(1, 65535))
            length = draw(st.integers(1, 20))
            last = min(first + length - 1, 65535)
            pr = s.PortRange(first, last)
            if any(pr.overlaps(o) for p in proto.l4 for o in taken[p]):
                continue
            tfirst = draw(st.sampled_from([first, max(1, min(first + 7, 65535 - (last - first)))]))
            target = s.PortRange(tfirst, tfirst + last - first)
            for p in proto.l4:
                taken[p].append(pr)
            dev = draw(st.sampled_from(devices))
            forwards.append(
                s.PortForward(f + 1, proto, pr, dev.id, target, enabled=draw(st.booleans()))
            )
        openings = []
        for o in range(draw(st.integers(0, 4))):
            dev = draw(st.sampled_from(devices))
            ports = draw(st.none() | st.tuples(st.integers(1, 65535), st.integers(0, 30)))
            rng = None if ports is None else s.PortRange(ports[0], min(65535, ports[0] + ports[1]))
            openings.append(s.Opening(o + 1, dev.id, draw(st.sampled_from(list(s.Protocol))), rng))
        shaping = draw(
            st.none() | st.builds(s.Shaping, st.integers(8, 10**7), st.integers(8, 10**7))
        )
        members.append(
            s.Member(
                id=mid,
                public_ipv4=f"198.51.100.{next(pubs)}",
                devices=tuple(devices),
                forwards=tuple(forwards),
                openings=tuple(openings),
                shaping=shaping,
            )
        )
    policy = s.Policy(
        management_networks=draw(
            st.sampled_from([(), ("10.255.255.0/24", "10.255.255.0/28"), ("2001:db8:ff00::/56",)])
        ),
        blocked_outbound=draw(
            st.lists(
                st.tuples(st.sampled_from(["tcp", "udp", "both"]), st.integers(1, 200)), max_size=4
            )
        ),
        blocked_inbound=draw(
            st.lists(
                st.tuples(
                    st.sampled_from(["tcp", "udp", "both"]),
                    st.tuples(st.integers(100, 140), st.integers(140, 200)),
                ),
                max_size=3,
            )
        ),
        inbound_icmpv6_echo=draw(st.booleans()),
    )
    return s.Snapshot(policy=policy, host=HOST, members=tuple(members))


@pytest.fixture(scope="module")
def check_ns(lab_tools: None):  # type: ignore[no-untyped-def]
    name = "pl-chyp"
    try:
        t.run("ip", "netns", "del", name, check=False)
        t.add_namespace(name)
        yield name
    finally:
        t.run("ip", "netns", "del", name, check=False)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(snap=snapshots())
def test_generated_snapshots_pass_nft_check(check_ns: str, snap: s.Snapshot) -> None:
    compiled = compile_snapshot(snap)
    result = t.nft_check(check_ns, compiled.nft)
    assert result.returncode == 0, result.stderr + "\n" + compiled.nft[:3000]
    assert compiled.nft == compile_snapshot(snap).nft
