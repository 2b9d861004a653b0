"""Real packets through compiled rule sets in namespaces of our own (see topology.py)."""

from __future__ import annotations

import json

import pytest

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
