"""Compiler output: golden files, determinism, hashing, class ids, and no Django anywhere."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.ruleset.builders import make_member, make_small_members, make_snapshot
from workers.ruleset import compile_snapshot
from workers.ruleset import snapshot as s
from workers.ruleset.shaping import class_minors
from workers.ruleset.spelling import fmt4, fmt6

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text(), (
        f"{name} differs from the golden file (UPDATE_GOLDEN=1 to accept)"
    )


def test_golden_small_nft(small_snapshot: s.Snapshot) -> None:
    check_golden("small.nft", compile_snapshot(small_snapshot).nft)


def test_golden_small_tc(small_snapshot: s.Snapshot) -> None:
    check_golden("small.tc", compile_snapshot(small_snapshot).tc)


def test_golden_small_mq_tc() -> None:
    snap = make_snapshot(shaping_root="mq", tx_queues=4)
    check_golden("small_mq.tc", compile_snapshot(snap).tc)


def test_same_snapshot_gives_identical_bytes_and_hash(small_snapshot: s.Snapshot) -> None:
    a = compile_snapshot(small_snapshot)
    b = compile_snapshot(make_snapshot(tuple(reversed(make_small_members()))))
    assert a.nft == b.nft
    assert a.tc == b.tc
    assert a.content_hash == b.content_hash


def test_no_version_marker_in_the_rule_set(small_snapshot: s.Snapshot) -> None:
    """The hash names the compile; the host's helper keeps it, the table carries no marker."""
    import hashlib

    c = compile_snapshot(small_snapshot)
    assert c.content_hash not in c.nft
    assert "set version" not in c.nft
    assert "portal_fw.version" not in c.counts
    expected = hashlib.sha256(c.nft.encode() + b"\0" + c.tc.encode()).hexdigest()
    assert c.content_hash == expected


def test_any_change_changes_the_hash(small_snapshot: s.Snapshot) -> None:
    base = compile_snapshot(small_snapshot).content_hash
    shaped = make_snapshot((*make_small_members()[:2], make_member(1, shaping=s.Shaping(100, 100))))
    assert compile_snapshot(shaped).content_hash != base
    assert compile_snapshot(make_snapshot(link_kbit=1_000_000)).content_hash != base


def test_descriptions_never_reach_the_text(small_snapshot: s.Snapshot) -> None:
    c = compile_snapshot(small_snapshot)
    for needle in ("quoted", "rm -rf", "web", "ssh"):
        assert needle not in c.nft


def test_only_portal_tables_are_named(small_snapshot: s.Snapshot) -> None:
    """The filter table and the NAT table (ip family: IPv6 meets no NAT hook), nothing else."""
    text = compile_snapshot(small_snapshot).nft
    assert {line for line in text.splitlines() if line.startswith(("table", "delete"))} == {
        "table inet portal_fw {}",
        "delete table inet portal_fw",
        "table inet portal_fw {",
        "table ip portal_nat {}",
        "delete table ip portal_nat",
        "table ip portal_nat {",
    }
    assert "flush" not in text


def test_nat_lives_in_the_ip_table_only(small_snapshot: s.Snapshot) -> None:
    """No NAT chain and no NAT map in the inet table: an IPv6 flow takes no NAT binding."""
    fw, nat = compile_snapshot(small_snapshot).ruleset.tables
    assert (fw.family, nat.family) == ("inet", "ip")
    assert not [c.name for c in fw.chains if c.type == "nat"]
    assert not [r for c in fw.chains for r in c.rules if " dnat ip" in r or " snat ip" in r]
    assert {c.name for c in nat.chains} == {"dstnat", "srcnat"}
    assert {x.name for x in nat.sets} == {"fwd_both", "fwd_ranges", "fwd_tcp", "fwd_udp", "src_nat"}
    assert not {x.name for x in fw.sets} & {x.name for x in nat.sets}  # moved, not copied


def test_counts(small_snapshot: s.Snapshot) -> None:
    counts = compile_snapshot(small_snapshot).counts
    assert counts["portal_nat.fwd_tcp"] == 4  # tcp 8080, shifted 2200-2202 (3)
    assert counts["portal_nat.fwd_both"] == 1  # one element for tcp and udp
    assert counts["portal_nat.fwd_udp"] == 0
    assert counts["portal_nat.fwd_ranges"] == 1
    assert counts["portal_nat.src_nat"] == 3  # member 3 has no public address ...
    assert counts["portal_fw.nopub4"] == 1  # ... so its device is here (anti-spoofing passes)
    assert counts["portal_fw.acct6n_out"] == 2  # members 1 and 2 each own their /64
    assert counts["portal_fw.acct6_out"] == 0
    assert "portal_fw.src6_net" not in counts  # anti-spoofing looks up acct6n_out (no copy)
    assert "portal_fw.dev4_pub" not in counts  # ... and acct4_out
    assert counts["portal_fw.shape6_net"] == 1
    assert counts["portal_fw.open6_all"] == 2
    assert counts["portal_nat.rules"] == 6
    assert counts["htb.classes"] == 2  # member 2 down and up


def test_class_ids_derive_from_member_id_not_position() -> None:
    assert class_minors([1, 2, 3]) == {1: 0x10, 2: 0x11, 3: 0x12}
    assert class_minors([3]) == {3: 0x12}  # member 3 keeps its class when 1 and 2 leave
    wrapped = class_minors([1, 65505, 65506])
    assert wrapped[1] == 0x10
    assert len(set(wrapped.values())) == 3


def test_shaping_classes_stable_when_another_member_is_added() -> None:
    one = make_member(5, public="198.51.100.9", shaping=s.Shaping(1000, 500))
    two = make_member(3, public="198.51.100.8", shaping=s.Shaping(1000, 500))
    before = compile_snapshot(make_snapshot((one,))).ruleset.shapers[0].classes
    after = compile_snapshot(make_snapshot((one, two))).ruleset.shapers[0].classes
    assert set(before) <= set(after)


def test_mq_layout_spreads_members_over_queues() -> None:
    members = tuple(
        make_member(i, public=f"198.51.100.{i + 20}", shaping=s.Shaping(1000, 1000))
        for i in range(1, 5)
    )
    c = compile_snapshot(make_snapshot(members, shaping_root="mq", tx_queues=2))
    majors = {cl.major for cl in c.ruleset.shapers[0].classes}
    assert majors == {0x100, 0x101}
    assert "qdisc replace dev pl-cfwd root handle 1: mq" in c.tc
    assert "10.100.0.10 : 101:10" in c.nft  # member 1 -> queue 1


def test_address_spelling_is_valid_and_round_trips() -> None:
    for text in (
        "2001:db8:100:1::10",
        "2001:db8::",
        "::1",
        "2001:db8:0:0:1:0:0:1",
        "fe80::1:2:3:4",
        "1:2:3:4:5:6:7:8",
    ):
        a = ipaddress.IPv6Address(text)
        assert ipaddress.IPv6Address(fmt6(a)) == a
        assert fmt6(a).count("::") <= 1
    for text in ("10.0.0.1", "198.51.100.255", "0.0.0.0"):  # noqa: S104
        assert fmt4(ipaddress.IPv4Address(text)) == text


def test_ipaddress_keeps_its_integer_slot() -> None:
    # fmt4/fmt6 read ipaddress's `_ip` directly for speed; fail loudly if the stdlib changes it.
    assert ipaddress.IPv4Address("10.0.0.1")._ip == 0x0A000001
    assert ipaddress.IPv6Address("::2")._ip == 2


def test_snapshot_replace_keeps_validation() -> None:
    d = s.Device(id=1, ipv4="10.100.0.1")
    with pytest.raises(s.SnapshotError):
        dataclasses.replace(d, ipv4="2001:db8::1")


def test_compiler_imports_no_django() -> None:
    code = (
        "import sys, workers.ruleset, workers.ruleset.diff;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'django', 'celery', 'kombu', 'rest_framework'});"
        "print(','.join(bad))"
    )
    root = Path(__file__).resolve().parents[3]
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    assert out.stdout.strip() == "", f"workers.ruleset imported {out.stdout.strip()}"


def test_compiler_uses_only_the_standard_library() -> None:
    root = Path(__file__).resolve().parents[3] / "workers" / "ruleset"
    allowed = set(sys.stdlib_module_names) | {"workers"}
    for path in root.glob("*.py"):
        for line in path.read_text().splitlines():
            words = line.split()
            if line.startswith(("import ", "from ")):
                top = words[1].split(".")[0]
                assert top in allowed or top == "__future__", f"{path.name}: {line}"


def _rule(text: str, comment: str) -> str:
    return next(line.strip() for line in text.splitlines() if f'comment "{comment}' in line)


def test_member_without_public_ipv4_passes_anti_spoofing_but_gets_no_nat(
    small_snapshot: s.Snapshot,
) -> None:
    text = compile_snapshot(small_snapshot).nft
    assert "elements = { 10.100.0.30 }" in text  # set nopub4: member 3's device
    assert "10.100.0.30 :" not in text  # never in src_nat
    # A source in neither set is no device: a management source (this host has no management
    # link) or a spoof, dropped and counted.
    foreign = [r.strip() for r in text.split("chain foreign4 {")[1].split("}")[0].splitlines()]
    assert foreign[1:] == [
        "ip saddr @mgmt4 goto out_pass",
        'counter drop comment "anti-spoofing: IPv4 source is no device address"',
        "",
    ]
    no_nat = _rule(text, "member without public IPv4")
    assert no_nat.startswith('oifname "pl-cfwu" ip saddr @nopub4 counter drop')
    chain = text.split("chain from_members {")[1].split("\n\t}")[0]
    spoof = "ip saddr != @acct4_out ip saddr != @nopub4 jump foreign4"
    assert chain.index(spoof) < chain.index("member without public IPv4")


def test_ipv6_anti_spoofing_per_member_64_and_per_address_when_shared() -> None:
    own = make_member(1, public="198.51.100.5")  # 2001:db8:100:1::a
    roommate = make_member(2, public="198.51.100.6")  # 2001:db8:100:1::b, the same /64
    alone = s.Member(
        id=3,
        public_ipv4="198.51.100.7",
        devices=(
            s.Device(id=30, ipv4="10.100.0.30", ipv6=("2001:db8:100:3::1", "2001:db8:100:3::2")),
            s.Device(id=31, ipv4="10.100.0.31", ipv6=("2001:db8:100:3::3",)),
        ),
        shaping=s.Shaping(1000, 1000),
    )
    sets = {
        x.name: x.elements
        for x in compile_snapshot(make_snapshot((own, roommate, alone))).ruleset.tables[0].sets
    }
    assert sets["acct6n_out"] == ("2001:db8:100:3::",)  # one element for member 3's three
    assert sets["acct6_out"] == ("2001:db8:100:1::a", "2001:db8:100:1::b")  # shared: exact
    chain = compile_snapshot(make_snapshot((own,))).nft.split("chain from_members {")[1]
    assert "ip6 saddr & ffff:ffff:ffff:ffff:: != @acct6n_out ip6 saddr != @acct6_out" in chain
    assert sets["shape6_net"] == ("2001:db8:100:3:: : 1:12",)
    assert sets["shape6"] == ()


def test_hash_sets_are_sized_and_bounded() -> None:
    from workers.ruleset.spelling import capacity

    assert capacity(0) == 1024
    assert capacity(60_000) == 131072
    assert all(capacity(n) >= n * 5 // 4 for n in (0, 1, 819, 820, 5000, 104_857, 104_858))
    sets = compile_snapshot(make_snapshot()).ruleset.tables[0].sets
    for x in sets:
        if "interval" not in x.flags and x.name != "version":
            assert x.size is not None
            assert x.size >= len(x.elements)
