"""Real packets through compiled rule sets in namespaces of our own (see topology.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.bench.ruleset_bench import single_inet_table
from tests.e2e.ruleset import ctdump
from tests.e2e.ruleset import topology as t
from tests.e2e.ruleset.scenario import (
    DEV1_V4,
    DEV1_V6,
    DEV2_V4,
    DEV3_V4,
    DEV3_V6,
    INET_V4,
    INET_V6,
    PUB1,
    PUB2,
    SHAPED_KBIT,
    SPOOF_V4,
    SPOOF_V6,
    lab_snapshot,
)
from workers.ruleset import Compiled, compile_snapshot

pytestmark = pytest.mark.lab


def connect(ns: str, addr: str, port: int, *extra: str) -> str:
    return t.peer(ns, "connect", addr, str(port), *extra).stdout.strip()


def test_no_version_marker_is_loaded(lab: Compiled) -> None:
    """The host's helper keeps the version; the loaded table carries no marker set."""
    listing = t.run("nft", "list", "table", "inet", "portal_fw", ns=t.FW)
    assert "set version" not in listing
    assert lab.content_hash not in listing


def test_forward_reachable_and_unforwarded_port_not(lab: Compiled) -> None:
    with t.Server(t.DORM, DEV1_V4, "80") as web, t.Server(t.DORM, DEV1_V4, "81") as other:
        assert connect(t.INET, PUB1, 8080) == f"peer={INET_V4}"
        assert connect(t.INET, PUB1, 8081).startswith("ERROR")
        assert "peer=" not in other.stop()
        assert f"peer={INET_V4}" in web.stop()


def test_udp_range_forward(lab: Compiled) -> None:
    with t.Server(t.DORM, DEV1_V4, "6005", "--udp"):
        assert connect(t.INET, PUB1, 6005, "--udp") == f"peer={INET_V4}"


def test_member_leaves_from_its_own_public_ipv4(lab: Compiled) -> None:
    with t.Server(t.INET, INET_V4, "9001") as srv:
        assert connect(t.DORM, INET_V4, 9001, "--bind", DEV1_V4) == f"peer={PUB1}"
        assert connect(t.DORM, INET_V4, 9001, "--bind", DEV2_V4) == f"peer={PUB2}"
        assert srv.stop().split() == [f"peer={PUB1}", f"peer={PUB2}"]


def test_ipv6_opening_reachable_and_closed_port_not(lab: Compiled) -> None:
    with t.Server(t.DORM, DEV1_V6, "2222"), t.Server(t.DORM, DEV1_V6, "2223") as closed:
        assert connect(t.INET, DEV1_V6, 2222) == "peer=2001:db8:ffff::10"
        assert connect(t.INET, DEV1_V6, 2223).startswith("ERROR")
        assert "peer=" not in closed.stop()


SPOOF4 = "anti-spoofing: IPv4"
SPOOF6 = "anti-spoofing: IPv6"
NO_NAT = "member without public IPv4: no Internet via NAT"


def counter(comment: str) -> int:
    # A source that is no device address leaves from_members for foreign4/6 (this host has no
    # management link: a management source is accepted there, anything else dropped).
    chain = {SPOOF4: "foreign4", SPOOF6: "foreign6"}.get(comment, "from_members")
    return t.rule_counter(t.FW, chain, comment)


def test_spoofed_sources_dropped(lab: Compiled) -> None:
    spoof4, spoof6 = counter(SPOOF4), counter(SPOOF6)
    with (
        t.Server(t.INET, INET_V4, "9002", "--udp") as srv4,
        t.Server(t.INET, "2001:db8:ffff::10", "9002", "--udp") as srv6,
    ):
        assert connect(t.DORM, INET_V4, 9002, "--udp", "--bind", SPOOF_V4).startswith("ERROR")
        assert connect(t.DORM, "2001:db8:ffff::10", 9002, "--udp", "--bind", SPOOF_V6).startswith(
            "ERROR"
        )
        assert connect(t.DORM, INET_V4, 9002, "--udp", "--bind", DEV1_V4) == f"peer={PUB1}"
        assert (
            connect(t.DORM, "2001:db8:ffff::10", 9002, "--udp", "--bind", DEV1_V6)
            == f"peer={DEV1_V6}"
        )
        assert srv4.stop().split() == [f"peer={PUB1}"]
        assert srv6.stop().split() == [f"peer={DEV1_V6}"]
    assert counter(SPOOF4) > spoof4  # dropped by the anti-spoofing rules, not elsewhere
    assert counter(SPOOF6) > spoof6


def element_packets(set_name: str, key: str) -> int:
    """The packets counted by one element of an accounting set (0 if it has none yet)."""
    listing = json.loads(t.run("nft", "-j", "list", "set", "inet", "portal_fw", set_name, ns=t.FW))
    for item in listing["nftables"]:
        for elem in (item.get("set") or {}).get("elem", []):
            e = elem.get("elem") if isinstance(elem, dict) else None
            if isinstance(e, dict) and e.get("val") == key:
                return int((e.get("counter") or {}).get("packets") or 0)
    raise AssertionError(f"{key} is not in {set_name}")


def test_anti_spoofing_looks_up_the_accounting_sets_without_counting(lab: Compiled) -> None:
    """Anti-spoofing looks a new flow's source up in acct4_out / acct6_out (this lab's members
    share one /64: per address), negated: a found key ends that rule before the element's
    counter runs, so a datagram is counted once, by the chain `account` (one new UDP flow
    each way: one datagram out, one answer in)."""
    keys = [
        ("acct4_out", DEV1_V4),
        ("acct4_in", DEV1_V4),
        ("acct6_out", DEV1_V6),
        ("acct6_in", DEV1_V6),
    ]
    before = [element_packets(name, key) for name, key in keys]
    with (
        t.Server(t.INET, INET_V4, "9007", "--udp") as srv4,
        t.Server(t.INET, INET_V6, "9007", "--udp") as srv6,
    ):
        assert connect(t.DORM, INET_V4, 9007, "--udp", "--bind", DEV1_V4) == f"peer={PUB1}"
        assert connect(t.DORM, INET_V6, 9007, "--udp", "--bind", DEV1_V6) == f"peer={DEV1_V6}"
        srv4.stop()
        srv6.stop()
    after = [element_packets(name, key) for name, key in keys]
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1, 1]


def test_member_without_public_ipv4_is_no_spoofer_but_gets_no_ipv4_internet(
    lab: Compiled,
) -> None:
    """Intended: its devices pass anti-spoofing; IPv4 to the Internet is dropped by the rule
    that says why (no public IPv4, so no NAT); IPv6 needs no NAT and reaches the Internet."""
    spoof4, no_nat = counter(SPOOF4), counter(NO_NAT)
    with (
        t.Server(t.INET, INET_V4, "9006", "--udp") as srv4,
        t.Server(t.INET, INET_V6, "9006", "--udp") as srv6,
    ):
        assert connect(t.DORM, INET_V4, 9006, "--udp", "--bind", DEV3_V4).startswith("ERROR")
        assert connect(t.DORM, INET_V6, 9006, "--udp", "--bind", DEV3_V6) == f"peer={DEV3_V6}"
        assert "peer=" not in srv4.stop()
        assert srv6.stop().split() == [f"peer={DEV3_V6}"]
    assert counter(NO_NAT) > no_nat
    assert counter(SPOOF4) == spoof4


def test_outbound_port_25_dropped(lab: Compiled) -> None:
    with t.Server(t.INET, INET_V4, "25") as smtp, t.Server(t.INET, INET_V4, "26"):
        assert connect(t.DORM, INET_V4, 25, "--bind", DEV1_V4).startswith("ERROR")
        assert connect(t.DORM, INET_V4, 26, "--bind", DEV1_V4) == f"peer={PUB1}"
        assert "peer=" not in smtp.stop()


def test_established_connection_survives_full_reload(lab: Compiled) -> None:
    with t.Server(t.INET, INET_V4, "9003", "--mode", "echo"):
        proc = t.subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                t.DORM,
                "timeout",
                "30",
                t.PYTHON,
                t.NETPEER,
                "hold",
                INET_V4,
                "9003",
                "--bind",
                DEV1_V4,
            ],
            stdin=t.subprocess.PIPE,
            stdout=t.subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdin is not None
            assert proc.stdout.readline().strip() == "connected"
            proc.stdin.write("before\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "before"
            reloaded = compile_snapshot(lab_snapshot(extra_forward=True))
            t.load(t.FW, reloaded.nft, reloaded.tc)  # full replacement, shapers included
            proc.stdin.write("after\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "after"
        finally:
            proc.kill()
            proc.wait(timeout=5)
            t.load(t.FW, lab.nft, lab.tc)  # back to the module's rule set


def test_shaped_download_within_15_percent(lab: Compiled) -> None:
    with t.Server(t.INET, INET_V4, "9004", "--mode", "stream", "--stream-seconds", "3.5"):
        result = t.peer(
            t.DORM, "download", INET_V4, "9004", "--bind", DEV2_V4, "--skip", "0.5", timeout=20
        )
    measured = json.loads(result.stdout)["bits_per_second"]
    rate = SHAPED_KBIT * 1000
    assert abs(measured - rate) <= 0.15 * rate, (
        f"shaped download {measured / 1000:.0f} kbit/s, class {SHAPED_KBIT}"
    )


def test_unshaped_download_is_not_limited(lab: Compiled) -> None:
    with t.Server(t.INET, INET_V4, "9005", "--mode", "stream", "--stream-seconds", "1.5"):
        result = t.peer(
            t.DORM, "download", INET_V4, "9005", "--bind", DEV1_V4, "--skip", "0.2", timeout=20
        )
    assert json.loads(result.stdout)["bits_per_second"] > 10 * SHAPED_KBIT * 1000


# ------------------------------------------------------------------ NAT in its own ip table


def test_ipv6_flows_take_no_nat_binding(lab: Compiled) -> None:
    """NAT lives in `ip portal_nat`: an IPv6 connection through the firewall (in through an
    opening, out from a member) meets no NAT hook, so conntrack gives it no (null) binding:
    none of the NAT status bits. With the NAT chains in the inet table it had SRC_NAT_DONE
    and DST_NAT_DONE (null bindings)."""
    with (
        t.Server(t.DORM, DEV1_V6, "2222"),
        t.Server(t.INET, INET_V6, "9010") as srv,
    ):
        assert connect(t.INET, DEV1_V6, 2222) == f"peer={INET_V6}"
        assert connect(t.DORM, INET_V6, 9010, "--bind", DEV1_V6) == f"peer={DEV1_V6}"
        assert srv.stop().split() == [f"peer={DEV1_V6}"]
    entries = [
        e
        for e in t.conntrack_entries(t.FW, "ipv6")
        if (e["orig"][1], e["orig"][3]) in {(DEV1_V6, 2222), (INET_V6, 9010)}
    ]
    assert {e["orig"][3] for e in entries} == {2222, 9010}, entries  # (earlier tests' too)
    assert [e["status"] & ctdump.NAT_BITS for e in entries] == [0] * len(entries), entries


def test_ipv4_forward_and_outbound_are_translated_both_ways(lab: Compiled) -> None:
    """IPv4 still gets its NAT from the ip table: a forward DNATs the way in and un-DNATs the
    reply, a member's connection SNATs the way out and un-SNATs the reply."""
    with (
        t.Server(t.DORM, DEV1_V4, "80") as web,
        t.Server(t.INET, INET_V4, "9011") as srv,
    ):
        assert connect(t.INET, PUB1, 8080) == f"peer={INET_V4}"  # the reply came back
        assert connect(t.DORM, INET_V4, 9011, "--bind", DEV1_V4) == f"peer={PUB1}"
        assert web.stop().split() == [f"peer={INET_V4}"]  # DNAT only: the client's address
        assert srv.stop().split() == [f"peer={PUB1}"]
    entries = t.conntrack_entries(t.FW, "ipv4")
    inbound = [e for e in entries if (e["orig"][1], e["orig"][3]) == (PUB1, 8080)]
    outbound = [e for e in entries if (e["orig"][1], e["orig"][3]) == (INET_V4, 9011)]
    assert inbound, entries  # (an earlier test's connection to the forward may be there too)
    assert len(outbound) == 1, entries
    (o,) = outbound
    for i in inbound:
        assert i["reply"][:3] == [DEV1_V4, INET_V4, 80]  # the reply comes from the device
        assert i["status"] & ctdump.IPS_DST_NAT
        assert not i["status"] & ctdump.IPS_SRC_NAT
    assert o["orig"][0] == DEV1_V4
    assert o["reply"][:2] == [INET_V4, PUB1]  # the reply goes to the member's public IPv4
    assert o["status"] & ctdump.IPS_SRC_NAT
    assert not o["status"] & ctdump.IPS_DST_NAT


def portal_tables() -> set[str]:
    return {
        line.strip()
        for line in t.run("nft", "list", "tables", ns=t.FW).splitlines()
        if "portal_" in line
    }


def load_as_the_agent(text: str) -> None:
    """One `nft -f` that deletes every loaded portal table and loads `text`, as the host
    agent's full load and rollback restore do (portal_fw/nft.py, `transaction`)."""
    t.load(t.FW, "".join(f"delete {table}\n" for table in sorted(portal_tables())) + text)


def test_a_host_on_the_single_table_moves_to_two_tables_without_a_gap(lab: Compiled) -> None:
    """The upgrade: a host that runs the old single inet table gets both new tables in one
    `nft -f` (one kernel transaction); NATed connections held across it keep flowing both ways,
    new ones are translated by the new table, and the way back (a rollback point holding the
    old text: the agent deletes every portal table in the same transaction) works the same."""
    old = single_inet_table(lab.ruleset)
    try:
        load_as_the_agent(old)
        assert portal_tables() == {"table inet portal_fw"}
        assert "dnat ip" in t.run("nft", "list", "chain", "inet", "portal_fw", "dstnat", ns=t.FW)
        with (
            t.Server(t.DORM, DEV1_V4, "7007", "--mode", "echo"),
            t.Server(t.INET, INET_V4, "9012", "--mode", "echo"),
            t.Server(t.DORM, DEV1_V4, "80"),
            t.Server(t.INET, INET_V4, "9013"),
            t.Held(t.INET, PUB1, 7007) as inbound,  # through a forward: DNAT
            t.Held(t.DORM, INET_V4, 9012, "--bind", DEV1_V4) as outbound,  # SNAT
        ):
            assert (inbound.echo("old"), outbound.echo("old")) == ("old", "old")
            load_as_the_agent(lab.nft)  # one transaction: the old table out, both new in
            assert portal_tables() == {"table inet portal_fw", "table ip portal_nat"}
            assert (inbound.echo("new"), outbound.echo("new")) == ("new", "new")
            assert connect(t.INET, PUB1, 8080) == f"peer={INET_V4}"
            assert connect(t.DORM, INET_V4, 9013, "--bind", DEV1_V4) == f"peer={PUB1}"
            # Back, as the agent restores a rollback point that holds the old text.
            load_as_the_agent(old)
            assert portal_tables() == {"table inet portal_fw"}
            assert (inbound.echo("back"), outbound.echo("back")) == ("back", "back")
            assert connect(t.INET, PUB1, 8080) == f"peer={INET_V4}"
            assert connect(t.DORM, INET_V4, 9013, "--bind", DEV1_V4) == f"peer={PUB1}"
    finally:
        load_as_the_agent(lab.nft)  # back to the module's rule set (from either layout)
        assert portal_tables() == {"table inet portal_fw", "table ip portal_nat"}


def test_blocked_inbound_ports_by_the_public_port_before_dnat(lab: Compiled) -> None:
    """A blocked inbound port drops a new flow to a forward's PUBLIC port (the port before
    DNAT: checked in to_members by the connection's original port) and to an IPv6 opening on
    it; a forward whose device port is blocked but whose public port is not stays open."""
    policy = dataclasses.replace(
        lab_snapshot().policy, blocked_inbound=(("tcp", 80), ("tcp", 7007), ("tcp", 2222))
    )
    blocked = compile_snapshot(dataclasses.replace(lab_snapshot(), policy=policy))
    try:
        t.load(t.FW, blocked.nft)
        with (
            t.Server(t.DORM, DEV1_V4, "80") as web,
            t.Server(t.DORM, DEV1_V4, "7007") as seven,
            t.Server(t.DORM, DEV1_V6, "2222") as ssh6,
        ):
            assert connect(t.INET, PUB1, 8080) == f"peer={INET_V4}"  # public 8080 -> device 80
            assert connect(t.INET, PUB1, 7007).startswith("ERROR")  # public 7007 blocked
            assert connect(t.INET, DEV1_V6, 2222).startswith("ERROR")  # opening on 2222 blocked
            assert f"peer={INET_V4}" in web.stop()
            assert "peer=" not in seven.stop()
            assert "peer=" not in ssh6.stop()
    finally:
        t.load(t.FW, lab.nft)
