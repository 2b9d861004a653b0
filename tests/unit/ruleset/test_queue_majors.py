"""The HTB majors of the mq layout miss the kernel's qdisc hash bucket of the leaf qdiscs."""

from __future__ import annotations

import dataclasses
import re

from tests.unit.ruleset.builders import make_small_members, make_snapshot
from workers.ruleset import compile_snapshot
from workers.ruleset.shaping import _qdisc_hash_bucket, queue_majors
from workers.ruleset.snapshot import Shaping


def test_majors_skip_the_bucket_of_handle_zero_and_stay_as_they_were_up_to_11_queues():
    assert queue_majors(11) == tuple(range(0x100, 0x10B))
    majors = queue_majors(64)
    assert len(set(majors)) == 64
    assert not [m for m in majors if _qdisc_hash_bucket(m << 16) == _qdisc_hash_bucket(0)]
    assert {0x10B, 0x11E, 0x120, 0x133}.isdisjoint(majors)
    assert queue_majors(12)[:11] == queue_majors(11)  # a queue keeps its major


def test_the_tc_tree_and_the_priority_map_name_the_same_majors_on_mq32():
    members = tuple(
        dataclasses.replace(m, id=m.id * 7, shaping=Shaping(2_000, 1_000))
        for m in make_small_members()
    )
    compiled = compile_snapshot(make_snapshot(members, shaping_root="mq", tx_queues=32))
    htbs = set(re.findall(r"handle ([0-9a-f]+): htb", compiled.tc))
    assert htbs == {f"{m:x}" for m in queue_majors(32)}
    classes = set(re.findall(r"classid ([0-9a-f]+:[0-9a-f]+) htb", compiled.tc))
    priorities = set(re.findall(r": ([0-9a-f]+:[0-9a-f]+)", compiled.nft))
    member_classes = {c for c in classes if not c.endswith(":2")}
    assert member_classes
    assert member_classes <= priorities
