"""Incremental transactions: element-only changes, structure changes, no version marker."""

from __future__ import annotations

from tests.bench.synthetic import synthetic_member, synthetic_snapshot
from tests.unit.ruleset.builders import make_member, make_small_members, make_snapshot
from workers.ruleset import compile_snapshot, diff, diff_stored
from workers.ruleset import snapshot as s


def test_no_change_only_moves_nothing(small_snapshot: s.Snapshot) -> None:
    a = compile_snapshot(small_snapshot)
    step = diff(a, compile_snapshot(small_snapshot))
    assert step is not None
    assert step.empty
    assert step.nft.splitlines()[1:] == []  # the header comment only: nothing to apply
    assert step.tc == ""


def test_structure_change_asks_for_full_replacement(small_snapshot: s.Snapshot) -> None:
    a = compile_snapshot(small_snapshot)
    assert diff(a, compile_snapshot(make_snapshot(member_interfaces=("pl-other",)))) is None
    assert diff(a, compile_snapshot(make_snapshot(link_kbit=5000))) is None
    assert diff(a, compile_snapshot(make_snapshot(shaping_root="mq", tx_queues=2))) is None


def test_new_forward_is_a_few_elements(small_snapshot: s.Snapshot) -> None:
    members = make_small_members()
    m2 = members[0]
    m2_new = s.Member(
        id=m2.id,
        public_ipv4=m2.public_ipv4,
        devices=m2.devices,
        forwards=(s.PortForward(99, "tcp", 25565, 20, 25565),),
        shaping=s.Shaping(3000, 1000),
    )
    old = compile_snapshot(small_snapshot)
    new = compile_snapshot(make_snapshot((m2_new, *members[1:])))
    step = diff(old, new)
    assert step is not None
    lines = step.nft.splitlines()
    assert lines[0].startswith("# portal increment")
    assert (
        "add element ip portal_nat fwd_tcp { 198.51.100.6 . 25565 : 10.100.0.20 . 25565 }" in lines
    )
    assert not any(" version " in line for line in lines)
    assert step.added == 1
    assert step.deleted == 0
    assert (
        step.tc
        == "class replace dev pl-cfwd parent 1: classid 1:11 htb rate 3000kbit ceil 3000kbit burst 1600 cburst 1600 quantum 37500\n"
    )
    assert step.old_hash == old.content_hash


def test_changed_map_value_is_deleted_then_added() -> None:
    m = make_member(1, forwards=(s.PortForward(1, "tcp", 8080, 10, 80),))
    m_new = make_member(1, forwards=(s.PortForward(1, "tcp", 8080, 10, 81),))
    step = diff(compile_snapshot(make_snapshot((m,))), compile_snapshot(make_snapshot((m_new,))))
    assert step is not None
    text = step.nft
    assert "delete element ip portal_nat fwd_tcp { 198.51.100.5 . 8080 }" in text
    assert text.index("delete element ip portal_nat fwd_tcp") < text.index(
        "add element ip portal_nat fwd_tcp"
    )


def test_unshaping_a_member_deletes_its_classes() -> None:
    shaped = make_member(1, shaping=s.Shaping(1000, 500))
    plain = make_member(1)
    step = diff(
        compile_snapshot(make_snapshot((shaped,))), compile_snapshot(make_snapshot((plain,)))
    )
    assert step is not None
    assert step.tc.splitlines() == [
        "class del dev pl-cfwd classid 1:10",
        "class del dev pl-cfwu classid 1:10",
    ]
    assert "delete element inet portal_fw shape4 { 10.100.0.10 }" in step.nft
    assert "delete element inet portal_fw shape6_net { 2001:db8:100:1:: }" in step.nft


def test_one_change_in_a_large_snapshot_is_small() -> None:
    base = synthetic_snapshot(2000)
    members = list(base.members)
    members[1234] = synthetic_member(4321)  # a different member in place of another
    step = diff(
        compile_snapshot(base), compile_snapshot(s.Snapshot(base.policy, base.host, tuple(members)))
    )
    assert step is not None
    assert step.added < 40
    assert step.deleted < 40
    assert len(step.nft) < 8000


def test_set_outgrowing_its_size_asks_for_full_replacement() -> None:
    small = synthetic_snapshot(10)
    grown = synthetic_snapshot(400)  # src_nat: 30 -> 1200 elements, above capacity 1024
    assert diff(compile_snapshot(small), compile_snapshot(grown)) is None


def test_diff_from_stored_json_equals_diff_from_objects(small_snapshot: s.Snapshot) -> None:
    old = compile_snapshot(small_snapshot)
    members = make_small_members()
    new = compile_snapshot(make_snapshot((members[0], members[2])))  # member 3 leaves
    stored = small_snapshot.to_json()
    step = diff_stored(stored, old.content_hash, new)
    assert step is not None
    assert step == diff(old, new)
    assert "delete element inet portal_fw nopub4 { 10.100.0.30 }" in step.nft


def test_diff_from_stored_json_refuses_a_foreign_base(small_snapshot: s.Snapshot) -> None:
    new = compile_snapshot(small_snapshot)
    assert diff_stored(small_snapshot.to_json(), "0" * 64, new) is None
