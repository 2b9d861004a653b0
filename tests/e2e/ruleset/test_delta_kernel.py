"""Delta compile == full compile in the kernel: random member changes applied as increments
(tc class lines, then the nft element transaction) on top of a full load in one namespace
leave exactly the nft sets, maps and HTB classes that a fresh full load of the same members
leaves in another, after every step (namespaces pl-cdelta1/2, removed afterwards)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from tests.e2e.ruleset import topology as t
from tests.unit.ruleset.changes import Site
from tests.unit.ruleset.test_delta import HOST, POLICY
from workers.ruleset import build
from workers.ruleset import snapshot as s
from workers.ruleset.delta import DeltaBase, NotExpressible, content_digest, delta_step
from workers.ruleset.memo import MEMO
from workers.ruleset.render import render

pytestmark = pytest.mark.lab

STEPS = 25
# mq with 4 queues (the fast path's flowtable needs a kernel this machine lacks; its increments
# are the full replacement anyway, and the kernel lab in qemu covers the flowtable).
MQ = s.Host(
    name="pl-cfw",
    uplink_interfaces=("pl-cfwu",),
    member_interfaces=("pl-cfwd",),
    shaping_root="mq",
    tx_queues=4,
)
NAMESPACES = ("pl-cdelta1", "pl-cdelta2")


def kernel_state(ns: str) -> tuple[object, object, object]:
    return t.normalised_ruleset(ns), t.tc_classes(ns, "pl-cfwd"), t.tc_classes(ns, "pl-cfwu")


@pytest.fixture
def pair(lab_tools: None) -> Iterator[tuple[str, str]]:
    """Two empty namespaces, each with the host's two interfaces (4 queues) on a veth pair."""
    try:
        for name in NAMESPACES:
            t.run("ip", "netns", "del", name, check=False)
            t.add_namespace(name)
            t.veth(name, "pl-cfwu", name, "pl-cfwd", queues=4)
        yield NAMESPACES
    finally:
        for name in NAMESPACES:
            t.run("ip", "netns", "del", name, check=False)


@pytest.mark.parametrize(
    ("seed", "host"), [(1, HOST), (2, HOST), (3, MQ)], ids=["htb-1", "htb-2", "mq"]
)
def test_increments_leave_the_kernel_state_of_a_fresh_full_load(
    pair: tuple[str, str], seed: int, host: s.Host
) -> None:
    stepped, fresh_ns = pair
    rng = random.Random(seed)  # noqa: S311 - a reproducible test sequence
    site = Site(rng, 12)
    MEMO.clear()
    snap = site.snapshot(POLICY, host)
    full = build(snap)
    base = DeltaBase.from_ruleset(snap, full)
    compiled = render(full)
    t.load(stepped, compiled.nft, compiled.tc)
    deltas = 0
    for _ in range(STEPS):
        changed = site.step(rng)
        snap = site.snapshot(POLICY, host)
        fresh = render(build(snap))
        try:
            step = delta_step(base, changed)
        except NotExpressible:  # what the pipeline does: the full compile, a new base
            base = DeltaBase.from_ruleset(snap, fresh.ruleset)
            t.load(stepped, fresh.nft, fresh.tc)
        else:
            deltas += 1
            assert step.new_hash == content_digest(fresh.ruleset)
            t.load(stepped, step.nft if not step.empty else None, step.tc or None)
        t.load(fresh_ns, fresh.nft, fresh.tc)
        assert kernel_state(stepped) == kernel_state(fresh_ns)
    assert deltas >= STEPS - 2
