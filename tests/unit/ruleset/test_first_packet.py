"""What a connection's first packet meets: blocked ports in a hash set, one path lookup."""

from __future__ import annotations

from workers.ruleset import Host, Policy, Snapshot, compile_snapshot
from workers.ruleset.sets import PORT_SET_HASH_LIMIT


def nft(policy: Policy) -> str:
    host = Host(name="fw", uplink_interfaces=("inet0",), member_interfaces=("dorm0", "dorm1"))
    return compile_snapshot(Snapshot(policy=policy, host=host)).nft


def block(text: str, kind: str, name: str) -> str:
    return text[text.index(f"\t{kind} {name} {{") :].split("\n\t}", 1)[0]


def test_few_blocked_ports_are_one_hash_element_each():
    text = nft(Policy(blocked_inbound=(("both", (135, 139)), ("tcp", 445))))
    blocked = block(text, "set", "blocked_in")
    assert "flags interval" not in blocked
    assert "size 1024" in blocked
    elements = [e.strip(" ,\t") for e in blocked.split("elements = {", 1)[1].splitlines()]
    ports = [e for e in elements if " . " in e]
    assert ports == [
        *(f"tcp . {p}" for p in (135, 136, 137, 138, 139, 445)),
        *(f"udp . {p}" for p in (135, 136, 137, 138, 139)),
    ]
    assert "tcp . 25" in block(text, "set", "blocked_out")


def test_many_blocked_ports_stay_ranges_in_an_interval_set():
    text = nft(Policy(blocked_outbound=(("tcp", (1, PORT_SET_HASH_LIMIT + 1)),)))
    blocked = block(text, "set", "blocked_out")
    assert "flags interval" in blocked
    assert f"tcp . 1-{PORT_SET_HASH_LIMIT + 1}" in blocked
    assert "size" not in blocked
    at_limit = block(
        nft(Policy(blocked_outbound=(("tcp", (1, PORT_SET_HASH_LIMIT)),))), "set", "blocked_out"
    )
    assert "flags interval" not in at_limit
    assert f"tcp . {PORT_SET_HASH_LIMIT}" in at_limit


def test_a_forwarded_packet_meets_no_mangle_chain_of_ours_one_path_lookup():
    """Shaped and counted where the forward chain accepts it: no prerouting or postrouting
    chain of the portal table on a forwarded packet's way (a hook each, on every packet)."""
    text = nft(Policy(blocked_inbound=(("tcp", (445, 445)),)))
    fw = text[: text.index("table ip portal_nat {}")]
    hooks = sorted(ln.strip() for ln in fw.splitlines() if " hook " in ln)
    assert hooks == [
        "type filter hook forward priority filter; policy drop;",
        "type filter hook input priority filter; policy accept;",
        "type filter hook output priority filter; policy accept;",
        "type filter hook output priority raw; policy accept;",
        "type filter hook prerouting priority raw; policy accept;",
    ]
    forward = block(text, "chain", "forward").splitlines()[2:]
    assert forward[0] == "\t\tct state invalid counter drop"
    assert forward[1] == (
        '\t\tiifname . oifname vmap { "dorm0" . "inet0" : goto from_members, "dorm1" . "inet0" : '
        'goto from_members, "inet0" . "dorm0" : goto to_members, "inet0" . "dorm1" : goto to_members }'
    )
    # Every accept of the two paths shapes and counts first; the other pairs shape only.
    for name, passed in (("from_members", "out_pass"), ("to_members", "in_pass")):
        rules = block(text, "chain", name)
        assert " accept" not in rules
        assert f"ct state established,related goto {passed}" in rules.splitlines()[1]
    assert block(text, "chain", "out_pass").splitlines()[1:] == [
        "\t\tjump shape_up",
        "\t\tgoto account_out",
    ]
    assert block(text, "chain", "in_pass").splitlines()[1:] == [
        "\t\tjump shape_down",
        "\t\tgoto account_in",
    ]
    shaped = '\t\toifname vmap { "dorm0" : jump shape_down, "dorm1" : jump shape_down, "inet0" : jump shape_up }'
    assert block(text, "chain", "pass").splitlines()[1:] == [shaped, "\t\taccept"]
    assert block(text, "chain", "output").splitlines()[2:] == [shaped]
    # Blocked inbound ports by the original (public) port: before DNAT's translation.
    to_members = block(text, "chain", "to_members")
    assert "meta l4proto tcp meta l4proto . ct original proto-dst @blocked_in drop" in to_members
    assert to_members.index("@blocked_in drop") < to_members.index("ct status dnat goto in_pass")
    assert 'ct state new iifname "inet0" meta l4proto . th dport @blocked_in drop' in block(
        text, "chain", "input"
    )


def test_no_blocked_inbound_port_no_rule():
    text = nft(Policy())
    assert "@blocked_in" not in text
    assert "hook input" not in text
