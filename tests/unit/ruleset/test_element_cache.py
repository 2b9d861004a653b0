"""The compiler reuses an unchanged member's elements from the host's last compile; the text
must be exactly what a compile from nothing gives, whatever changed in between."""

from __future__ import annotations

import dataclasses
import gc
import weakref

from tests.unit.ruleset.builders import make_member, make_small_members, make_snapshot
from workers.ruleset import compile_snapshot
from workers.ruleset import sets as sets_mod
from workers.ruleset import snapshot as s
from workers.ruleset.memo import MEMO


def fresh(snapshot: s.Snapshot) -> str:
    """The nft text and tc batch compiled with no element cache at all (nor the last compile's
    sets and classes, which the other host of a pair reuses)."""
    saved = MEMO.elements.copy(), MEMO.member_sets, MEMO.classes
    MEMO.elements.clear()
    MEMO.member_sets = MEMO.classes = None
    try:
        compiled = compile_snapshot(snapshot)
        return compiled.nft + compiled.tc
    finally:
        MEMO.elements.clear()
        MEMO.elements.update(saved[0])
        MEMO.member_sets, MEMO.classes = saved[1], saved[2]


def cached(snapshot: s.Snapshot) -> str:
    compiled = compile_snapshot(snapshot)
    return compiled.nft + compiled.tc


def test_every_kind_of_change_compiles_as_from_nothing():
    members = list(make_small_members())
    extra = [
        make_member(
            mid,
            public=f"198.51.100.{mid + 40}",
            devices=(
                s.Device(id=mid * 10, ipv4=f"10.100.1.{mid}", ipv6=(f"2001:db8:100:{mid}::1",)),
            ),
        )
        for mid in range(100, 106)
    ]
    steps = []
    current = members + extra
    steps.append(list(current))
    # A member gets shaped: its HTB class appears (and its /64 stays its own).
    current[-1] = dataclasses.replace(current[-1], shaping=s.Shaping(4000, 1000))
    steps.append(list(current))
    # Another member's device moves into the same /64: both /64 elements become per address.
    shared = current[-2].devices[0].ipv6
    current[-3] = dataclasses.replace(
        current[-3],
        devices=(
            dataclasses.replace(
                current[-3].devices[0], ipv6=(type(shared[0])(int(shared[0]) + 0x10),)
            ),
        ),
    )
    steps.append(list(current))
    # ...and leaves it again (the /64 is nobody's shared one any more).
    current[-3] = extra[-3]
    steps.append(list(current))
    # A member loses its public address; one disappears; one comes back unchanged.
    current[-4] = dataclasses.replace(current[-4], public_ipv4=None)
    gone = current.pop(-5)
    steps.append(list(current))
    current.append(gone)
    steps.append(list(current))
    for step in steps:
        snapshot = make_snapshot(members=tuple(step))
        assert cached(snapshot) == fresh(snapshot)
    # The same members under another shaping layout of the same host: other class ids.
    snapshot = make_snapshot(members=tuple(current), shaping_root=s.ShapingRoot.MQ, tx_queues=4)
    assert cached(snapshot) == fresh(snapshot)


def test_an_unchanged_member_is_not_rendered_again(monkeypatch):
    members = tuple(make_member(mid, public=f"198.51.100.{mid + 40}") for mid in range(100, 130))
    compile_snapshot(make_snapshot(members=members))
    rendered = []
    original = sets_mod._member_elements
    monkeypatch.setattr(
        sets_mod, "_member_elements", lambda m, *a: rendered.append(m.id) or original(m, *a)
    )
    changed = (*members[:-1], dataclasses.replace(members[-1], public_ipv4="198.51.100.99"))
    compile_snapshot(make_snapshot(members=changed))
    assert rendered == [members[-1].id]


def test_switching_the_syn_proxy_on_brings_every_tcp_forward_into_its_set():
    # The SYN proxy's elements are made only while it is on: a member's cached elements from
    # a compile without it must not be reused for a compile with it (and back).
    members = make_small_members()
    off = make_snapshot(members=members)
    on = s.Snapshot(
        policy=dataclasses.replace(off.policy, syn_proxy=True), host=off.host, members=members
    )
    for snapshot in (off, on, off, on):
        assert cached(snapshot) == fresh(snapshot)
    assert "syn_fwd4" in cached(on)


def test_gc_pause_restores_the_collector_and_leaves_objects_collectable():
    class Node:
        pass

    with s.gc_paused():
        assert not gc.isenabled()
        node = Node()
        node.me = node  # a cycle: only the collector can free it
        made = [[] for _ in range(s.GC_PROMOTE_AT)]  # enough to be promoted on the way out
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0  # moved to the old generation, not left frozen
    gone = weakref.ref(node)
    del node, made
    gc.collect()
    assert gone() is None


def test_the_second_host_of_a_pair_reuses_the_first_hosts_sets_and_compiles_the_same():
    """Two hosts built from one read share the members tuple: the second host's member sets
    and HTB classes are the first's objects, and its text is what a compile from nothing
    gives. A host with another HTB layout or another SYN-proxy policy compiles its own."""
    members = tuple(sorted(make_small_members(), key=lambda m: m.id))
    nat1 = make_snapshot(members, name="nat1")
    nat2 = make_snapshot(members, name="nat2")
    assert nat1.members is nat2.members is members  # kept as given: already in id order
    first = compile_snapshot(nat1)
    second = compile_snapshot(nat2)
    reused = {id(x) for t in first.ruleset.tables for x in t.sets}
    shared = [x.name for t in second.ruleset.tables for x in t.sets if id(x) in reused]
    assert "fwd_tcp" in shared
    assert "src_nat" in shared
    assert first.ruleset.shapers[0].classes is second.ruleset.shapers[0].classes
    assert second.nft + second.tc == fresh(nat2)

    mq = make_snapshot(members, name="nat3", shaping_root=s.ShapingRoot.MQ, tx_queues=4)
    compiled = compile_snapshot(mq)
    assert compiled.nft + compiled.tc == fresh(mq)
    assert compiled.tc != second.tc.replace("nat2", "nat3")
    syn = dataclasses.replace(nat2, policy=dataclasses.replace(nat2.policy, syn_proxy=True))
    compiled = compile_snapshot(syn)
    assert "syn_fwd4" in compiled.nft
    assert compiled.nft + compiled.tc == fresh(syn)


def test_members_out_of_order_are_sorted_and_a_sorted_tuple_is_kept():
    members = tuple(sorted(make_small_members(), key=lambda m: m.id))
    assert make_snapshot(members).members is members
    backwards = make_snapshot(tuple(reversed(members)))
    assert [m.id for m in backwards.members] == sorted(m.id for m in members)
    assert make_snapshot(list(members)).members == members


def test_the_memo_forgets_everything_and_the_next_compile_is_the_same() -> None:
    members = tuple(make_member(mid, public=f"198.51.100.{mid + 40}") for mid in range(100, 110))
    snapshot = make_snapshot(members=members)
    before = cached(snapshot)
    snapshot.to_json()
    kept = (MEMO.elements, MEMO.member_sets, MEMO.classes, MEMO.owners, MEMO.member_json)
    assert all(kept)
    MEMO.clear()
    gone = (MEMO.elements, MEMO.member_sets, MEMO.classes, MEMO.owners, MEMO.member_json)
    assert not any(gone)
    assert not MEMO.dhcp_json
    assert cached(snapshot) == before
