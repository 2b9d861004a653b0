"""A full tc load keeps the tree: what it leaves equals a fresh load, on a real kernel.

The agent plans a full tree against what the device runs (portal_fw/tctree.py): the same
layout keeps its qdiscs and classes (replaced in place, the gone ones deleted), another layout
is built anew through pfifo. Each test runs the agent (local mode, no SSH) in a namespace
``pl-tk<hex>`` it creates and deletes; a second namespace (``...f``) with the same devices gets
every tree by a plain fresh ``tc -batch``, and the two must read back the same: qdiscs, classes
(rates, ceils, parents), leaf qdiscs and filters. The trees are the compiler's own lines
(workers.ruleset.render: shaper_roots and class_line).

    flock /tmp/pl-lab.lock .venv/bin/pytest tests/e2e/lab/test_tc_keep.py -p no:django
"""

from __future__ import annotations

import json
import os
import random
import re
import secrets
import signal
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.lab.test_helper_bundle import Answer, sh
from tests.e2e.lab.test_helper_bundle import Host as AgentHost
from workers.ruleset.ir import HtbClass, Shaper
from workers.ruleset.render import class_line, shaper_roots
from workers.ruleset.shaping import queue_majors
from workers.ruleset.values import ShapingRoot

pytestmark = pytest.mark.lab

DEVS = ("dorm0", "inet0")
QUEUES = 8  # transmit queues of the test links: room for mq layouts up to 8
PROFILES = ((2_000, 4_000), (10_000, 20_000), (50_000, 100_000), (1_000, 1_000))


@dataclass(frozen=True)
class Layout:
    root: ShapingRoot
    queues: int = 1
    link_kbit: int = 1_000_000

    def majors(self) -> list[int]:
        return list(queue_majors(self.queues)) if self.root is ShapingRoot.MQ else [1]


def tree(layout: Layout, members: dict[int, tuple[int, int]]) -> str:
    """The compiler's full tc text for `members` (id -> rate, ceil) on both links."""
    majors = layout.majors()
    classes = tuple(
        HtbClass(majors[mid % len(majors)], 0x10 + mid - 1, rate, ceil)
        for mid, (rate, ceil) in sorted(members.items())
    )
    out = []
    for dev in DEVS:
        sh_ = Shaper(dev, layout.root, layout.queues, layout.link_kbit, classes)
        out += shaper_roots(sh_)
        out += [class_line("replace", dev, c) for c in classes]
    return "".join(out)


@dataclass
class Pair:
    """The agent's namespace and the namespace that gets every tree fresh."""

    agent: AgentHost
    fresh: str

    def apply(self, text: str, **files: dict) -> Answer:
        return self.agent.bundle(tc={"mode": "replace", "text": text}, **files)

    def load_fresh(self, text: str) -> None:
        sh("ip", "netns", "exec", self.fresh, "tc", "-batch", "-", input=text)

    def state(self, ns: str) -> dict[str, str]:
        return {dev: read_back(ns, dev) for dev in DEVS}

    def assert_like_fresh(self, text: str) -> None:
        self.load_fresh(text)
        assert self.state(self.agent.ns) == self.state(self.fresh)


def read_back(ns: str, dev: str) -> str:
    """Qdiscs, classes (details, sorted: the kernel lists them in hash order) and the filters of
    every HTB qdisc of one device, without statistics."""

    def tc(*argv: str) -> str:
        return sh("ip", "netns", "exec", ns, "tc", *argv).stdout

    qdisc = re.sub(r"\s*direct_packets_stat \d+", "", tc("-d", "qdisc", "show", "dev", dev))
    classes = "".join(sorted(tc("-d", "class", "show", "dev", dev).splitlines(keepends=True)))
    filters = "".join(
        f"[{h}]\n" + tc("filter", "show", "dev", dev, "parent", h)
        for h in re.findall(r"qdisc htb (\S+)", qdisc)
    )
    return qdisc + classes + filters


def links(ns: str) -> None:
    sh("ip", "netns", "add", ns)
    for dev in DEVS:
        q = str(QUEUES)
        sh("ip", "-n", ns, "link", "add", dev, "numtxqueues", q, "type", "veth", "peer", "name",
           f"{dev}p", "numtxqueues", q)  # fmt: skip
        sh("ip", "-n", ns, "link", "set", dev, "up")


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    if os.geteuid() != 0:
        pytest.fail("these tests need root (network namespaces)")
    ns = f"pl-tk{secrets.token_hex(3)}"
    state, etc = tmp_path / "state", tmp_path / "etc"
    etc.mkdir()
    artefacts = tmp_path / "artefacts.json"
    # A file artefact whose reload fails when the file says so: the part of a push after tc.
    reload = "import json, sys; sys.exit(json.load(open(sys.argv[1])).get('fail', 0))"
    artefacts.write_text(json.dumps({"demo": {
        "path": str(etc / "demo.json"),
        "check": ["/usr/bin/python3", "-I", "-m", "json.tool", "{file}"],
        "reload": ["/usr/bin/python3", "-I", "-c", reload, "{file}"],
        "mode": "0640",
    }}))  # fmt: skip
    agent = AgentHost(ns, ns, state, etc, artefacts)
    try:
        links(ns)
        links(ns + "f")
        yield Pair(agent, ns + "f")
    finally:
        with suppress(OSError, ValueError, KeyError):
            pending = json.loads((state / "pending.json").read_text())
            cmdline = Path(f"/proc/{pending['timer_pid']}/cmdline").read_bytes()
            if pending["token"].encode() in cmdline:  # our own timer process, by its pid
                os.kill(int(pending["timer_pid"]), signal.SIGTERM)
        sh("ip", "netns", "del", ns, check=False)
        sh("ip", "netns", "del", ns + "f", check=False)


def confirmed(pair: Pair, text: str, **files: dict) -> Answer:
    answer = pair.apply(text, **files)
    assert answer.rc == 0, answer
    assert pair.agent.fw("confirm").rc == 0
    return answer


def step(rng: random.Random, members: dict[int, tuple[int, int]], pool: range) -> None:
    """Random adds, removals and rate changes (a few of each, sometimes none)."""
    present = sorted(members)
    for mid in rng.sample(present, min(len(present), rng.randint(0, 6))):
        del members[mid]
    for mid in rng.sample(sorted(members), min(len(members), rng.randint(0, 6))):
        members[mid] = rng.choice(PROFILES)
    absent = [m for m in pool if m not in members]
    for mid in rng.sample(absent, min(len(absent), rng.randint(0, 8))):
        members[mid] = rng.choice(PROFILES)


@pytest.mark.parametrize(
    "layout", [Layout(ShapingRoot.HTB), Layout(ShapingRoot.MQ, 4)], ids=["htb", "mq4"]
)
def test_random_full_loads_keep_the_tree_and_equal_a_fresh_load(pair: Pair, layout: Layout):
    rng = random.Random(26)  # noqa: S311 (a repeatable sequence)
    pool = range(1, 120)
    members = {mid: rng.choice(PROFILES) for mid in rng.sample(list(pool), 40)}
    first = pair.apply(tree(layout, members))
    assert first.rc == 0, first
    assert first.data["tc_tree"] == {"kept": [], "built": list(DEVS)}  # nothing ran before
    pair.assert_like_fresh(tree(layout, members))
    for n in range(8):
        step(rng, members, pool)
        if n == 5:  # the link rate (the default classes) is not the layout
            layout = Layout(layout.root, layout.queues, 2_000_000)
        text = tree(layout, members)
        answer = pair.apply(text)
        assert answer.rc == 0, answer
        assert answer.data["tc_tree"] == {"kept": list(DEVS), "built": []}
        pair.assert_like_fresh(text)
    assert pair.agent.fw("digest").data["differs_from_applied"] == []


def test_hand_made_filters_leaf_qdiscs_and_classes_are_gone_after_a_kept_load(pair: Pair):
    """What a fresh load would not have: a filter pointing at a class that goes (it keeps the
    class from being deleted), a leaf qdisc on a class that stays, a class added by hand."""
    layout = Layout(ShapingRoot.MQ, 2)
    members = {1: PROFILES[0], 2: PROFILES[1], 3: PROFILES[2], 4: PROFILES[0]}
    confirmed(pair, tree(layout, members))

    def ns_tc(*argv: str) -> None:
        sh("ip", "netns", "exec", pair.agent.ns, "tc", *argv)

    # member 3 -> class 101:12 (queue 1), member 2 -> 100:11 (queue 0)
    ns_tc("filter", "add", "dev", "dorm0", "parent", "101:", "protocol", "ip", "prio", "1",
          "u32", "match", "ip", "dst", "10.0.0.3/32", "flowid", "101:12")  # fmt: skip
    ns_tc("qdisc", "add", "dev", "dorm0", "parent", "100:11", "handle", "20:", "pfifo")
    ns_tc("class", "add", "dev", "inet0", "parent", "100:", "classid", "100:99", "htb",
          "rate", "1mbit")  # fmt: skip
    del members[3]
    text = tree(layout, members)
    answer = pair.apply(text)
    assert answer.rc == 0, answer
    assert answer.data["tc_tree"]["kept"] == list(DEVS)
    pair.assert_like_fresh(text)


def test_a_layout_change_builds_the_tree_anew(pair: Pair):
    members = {mid: PROFILES[mid % 3] for mid in range(1, 30)}
    for layout in (
        Layout(ShapingRoot.HTB),
        Layout(ShapingRoot.MQ, 4),  # another root kind
        Layout(ShapingRoot.MQ, 8),  # more queues
        Layout(ShapingRoot.MQ, 2),  # fewer
        Layout(ShapingRoot.HTB),
    ):
        text = tree(layout, members)
        answer = pair.apply(text)
        assert answer.rc == 0, answer
        assert answer.data["tc_tree"] == {"kept": [], "built": list(DEVS)}, layout
        pair.assert_like_fresh(text)


def test_a_push_failing_after_tc_restores_the_previous_classes_and_again_after_a_recovery(
    pair: Pair,
):
    """The rollback point holds the classes before the push: a file reload failing after the
    kept tree was applied restores them (kept again), twice, with a good push in between."""
    layout = Layout(ShapingRoot.MQ, 4)
    rng = random.Random(7)  # noqa: S311 (a repeatable sequence)
    members = {mid: rng.choice(PROFILES) for mid in range(1, 50)}
    good = '{"v": 1}\n'
    base = tree(layout, members)
    confirmed(pair, base, demo={"mode": "replace", "text": good})
    for round_ in range(2):
        before = pair.state(pair.agent.ns)
        changed = dict(members)
        step(rng, changed, range(1, 80))
        changed[1] = (7_000, 7_000)  # at least one class differs
        answer = pair.apply(
            tree(layout, changed), demo={"mode": "replace", "text": '{"fail": 1}\n'}
        )
        assert answer.rc == 1, answer
        assert (answer.data["phase"], answer.data["artefact"]) == ("apply", "demo")
        assert answer.data["rolled_back"] is True
        assert answer.data["tc_verified"] is True
        assert pair.state(pair.agent.ns) == before
        pair.assert_like_fresh(base)
        # The recovery: a good push on top of the restored tree, kept as well.
        step(rng, members, range(1, 80))
        base = tree(layout, members)
        answer = confirmed(pair, base, demo={"mode": "replace", "text": f'{{"v": {round_ + 2}}}\n'})
        assert answer.data["tc_tree"]["kept"] == list(DEVS)
        pair.assert_like_fresh(base)


def test_an_explicit_rollback_of_a_layout_change_builds_the_old_tree_again(pair: Pair):
    members = {mid: PROFILES[mid % 3] for mid in range(1, 20)}
    old = tree(Layout(ShapingRoot.MQ, 4), members)
    confirmed(pair, old)
    answer = pair.apply(tree(Layout(ShapingRoot.HTB), {**members, 40: PROFILES[0]}))
    assert answer.rc == 0, answer
    rolled = pair.agent.fw("rollback")
    assert rolled.rc == 0, rolled
    assert rolled.data["tc_verified"] is True
    pair.assert_like_fresh(old)
