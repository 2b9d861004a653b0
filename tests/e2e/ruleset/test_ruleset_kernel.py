"""Kernel-level checks: full vs incremental state, nft -c on generated snapshots, mq roots."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from tests.bench.synthetic import synthetic_member
from tests.e2e.ruleset import topology as t
from tests.e2e.ruleset.scenario import HOST, POLICY, lab_members, lab_snapshot
from tests.unit.ruleset.strategies import snapshots
from workers.ruleset import compile_snapshot, diff
from workers.ruleset import snapshot as s

pytestmark = pytest.mark.lab


def kernel_state(ns: str) -> tuple[object, object, object]:
    return t.normalised_ruleset(ns), t.tc_classes(ns, "pl-cfwd"), t.tc_classes(ns, "pl-cfwu")


def changed_members() -> tuple[s.Member, ...]:
    """Every kind of element change against lab_members(): forwards, openings, shaping, devices."""
    m1, m2, _ = lab_members()
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
    # member 3 gets a public IPv4: its device moves from nopub4 to src_nat
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
    assert "set version" not in t.run("nft", "list", "table", "inet", "portal_fw", ns=scratch_ns)


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
