"""The compiler's lab: namespaces pl-cfw, pl-cinet, pl-cdorm, always removed afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.ruleset import topology
from tests.e2e.ruleset.scenario import DORM_ADDRESSES, lab_snapshot
from workers.ruleset import Compiled, compile_snapshot


@pytest.fixture(scope="session")
def lab_tools() -> None:
    """Root, ip, nft and tc are required; a missing one fails the test instead of skipping it."""
    try:
        topology.require_root_and_tools()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def lab(lab_tools: None) -> Iterator[Compiled]:
    """The topology with the lab snapshot's rule set and shapers loaded on pl-cfw."""
    topology.teardown()  # leftovers of a killed run
    try:
        topology.build_topology(DORM_ADDRESSES)
        compiled = compile_snapshot(lab_snapshot())
        topology.load(topology.FW, compiled.nft, compiled.tc)
        yield compiled
    finally:
        topology.teardown()


@pytest.fixture
def scratch_ns(lab_tools: None) -> Iterator[str]:
    """An empty namespace pl-cchk with the lab's two interface names on a veth pair."""
    name = "pl-cchk"
    try:
        topology.run("ip", "netns", "del", name, check=False)
        topology.add_namespace(name)
        topology.veth(name, "pl-cfwu", name, "pl-cfwd", queues=4)
        yield name
    finally:
        topology.run("ip", "netns", "del", name, check=False)
