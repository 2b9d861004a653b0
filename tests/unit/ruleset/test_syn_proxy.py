"""The SYN proxy for forwarded TCP ports in the compiled rule set (issue 15): which ports it
covers, where its three parts sit, and that it is off unless the policy turns it on."""

from __future__ import annotations

from workers.ruleset import Host, Policy, Snapshot, compile_snapshot
from workers.ruleset import snapshot as s


def snapshot(syn_proxy: bool) -> Snapshot:
    forwards = (
        s.PortForward(1, "tcp", s.PortRange(8080, 8080), 10, s.PortRange(80, 80)),
        s.PortForward(2, "both", s.PortRange(27015, 27020), 10, s.PortRange(27015, 27020)),
        s.PortForward(3, "udp", s.PortRange(5000, 5000), 10, s.PortRange(5000, 5000)),
        s.PortForward(4, "tcp", s.PortRange(9000, 9001), 10, s.PortRange(9100, 9101)),
    )
    member = s.Member(
        id=1, public_ipv4="198.51.100.31", devices=(s.Device(id=10, ipv4="10.100.1.31"),),
        forwards=forwards,
    )  # fmt: skip
    return Snapshot(
        policy=Policy(syn_proxy=syn_proxy),
        host=Host(name="fw", uplink_interfaces=("inet0",), member_interfaces=("dorm0",)),
        members=(member,),
    )


def block(text: str, kind: str, name: str) -> str:
    start = text.index(f"\t{kind} {name} {{")
    return text[start : text.index("\n\t}", start)]


def test_the_proxy_covers_the_public_side_of_every_tcp_forward_and_no_udp_one():
    text = compile_snapshot(snapshot(True)).nft
    keys = block(text, "set", "syn_fwd4")
    assert "flags interval" in keys
    for element in (
        "198.51.100.31 . 8080",
        "198.51.100.31 . 27015-27020",
        "198.51.100.31 . 9000-9001",
    ):
        assert element in keys
    assert "5000" not in keys


def test_untracked_syn_then_proxy_then_dnat_in_the_output_hook():
    text = compile_snapshot(snapshot(True)).nft
    early = block(text, "chain", "early")
    assert (
        'iifname "inet0" tcp flags & (fin | syn | rst | ack) == syn ip daddr . tcp dport @syn_fwd4 notrack'
        in early
    )
    forward = block(text, "chain", "forward").splitlines()
    proxy = next(i for i, r in enumerate(forward) if "synproxy" in r)
    invalid = next(i for i, r in enumerate(forward) if "ct state invalid counter drop" in r)
    path = next(i for i, r in enumerate(forward) if r.startswith("\t\tiifname . oifname vmap"))
    assert proxy < invalid < path  # before the path lookup: one rule and counter for all paths
    assert "ct state invalid,untracked ip daddr . tcp dport @syn_fwd4" in forward[proxy]
    assert "synproxy" not in block(text, "chain", "to_members")
    local = block(text, "chain", "dstnat_local")
    assert "type nat hook output priority -100" in local
    assert "map @fwd_tcp" in local
    assert "map @fwd_both" in local
    assert "map @fwd_ranges" in local


def test_off_by_default_and_equal_stored_snapshots():
    text = compile_snapshot(snapshot(False)).nft
    assert "synproxy" not in text
    assert "syn_fwd4" not in text
    assert "dstnat_local" not in text
    on = snapshot(True)
    assert Snapshot.from_json(on.to_json()) == on
    assert "syn_proxy" not in snapshot(False).to_json()
