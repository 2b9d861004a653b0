"""The helper reads the accounting sets' counters by netlink (its fast path slices every
element at the first one's offsets) and by `nft -j`: both give every key with its own values,
IPv4 and IPv6, also when the elements do not share one layout."""

from __future__ import annotations

import ipaddress
import random
from pathlib import Path

import pytest

from portal_fw import netlink, traffic
from portal_fw.host import Host
from tests.e2e.ruleset import topology as t

pytestmark = pytest.mark.lab  # netlink and nft inside the pl-c* namespaces: needs root


def in_ns(ns: str):
    """Enter the namespace for this process's netlink socket (restored by the caller)."""
    import ctypes
    import os

    libc = ctypes.CDLL(None, use_errno=True)
    here = os.open("/proc/self/ns/net", os.O_RDONLY)
    there = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    if libc.setns(there, 0) != 0:
        raise OSError(ctypes.get_errno(), "setns")
    os.close(there)
    return libc, here


def test_netlink_and_json_readers_agree_on_every_key(scratch_ns: str, tmp_path: Path) -> None:
    rng = random.Random(7)  # noqa: S311 - test data
    v4 = {
        f"10.100.{i // 250}.{i % 250 + 1}": (
            (0, 0) if i % 5 == 0 else (rng.randrange(10**9), rng.randrange(10**12))
        )
        for i in range(3000)
    }
    v6 = {
        str(ipaddress.IPv6Address(f"2001:db8:100:{i:x}::")): (
            rng.randrange(10**6),
            rng.randrange(2**63),
        )
        for i in range(2000)
    }

    def elements(values: dict) -> str:
        return ",\n".join(f"{k} counter packets {p} bytes {b}" for k, (p, b) in values.items())

    text = (
        "table inet portal_fw {\n"
        f"\tset acct4_in {{ type ipv4_addr; size 4096; counter; elements = {{ {elements(v4)} }} }}\n"
        f"\tset acct6n_out {{ type ipv6_addr; size 4096; counter; elements = {{ {elements(v6)} }} }}\n"
        "\tset acct4_out { type ipv4_addr; size 1024; counter; }\n"
        "}\n"
    )
    path = tmp_path / "acct.nft"
    path.write_text(text)
    t.run("ip", "netns", "exec", scratch_ns, "nft", "-f", str(path))
    host = Host(tmp_path / "state", "t")
    (tmp_path / "state").mkdir()
    import os

    libc, here = in_ns(scratch_ns)
    try:
        by_netlink = traffic.read_acct_netlink(host)
        by_json = traffic.read_acct_json(host)
        counted_netlink = traffic.read_acct_netlink(host, counted_only=True)
        counted_json = traffic.read_acct_json(host, counted_only=True)
    finally:
        libc.setns(here, 0)
        os.close(here)
    expected = {
        "acct4_in": {k: [p, b] for k, (p, b) in v4.items()},
        "acct6n_out": {k: [p, b] for k, (p, b) in v6.items()},
        "acct4_out": {},
    }
    assert by_netlink == expected
    assert by_json == expected
    nonzero = {n: {k: v for k, v in c.items() if v[1]} for n, c in expected.items()}
    assert counted_netlink == counted_json == nonzero


def test_the_walk_reads_elements_of_mixed_layout() -> None:
    fw = netlink

    def element(key: bytes, packets: int, octets: int, extra: bytes = b"") -> bytes:
        nla = fw.nla
        counter = nla(fw.NFTA_LIST_ELEM, nla(fw.NFTA_EXPR_NAME, b"counter\0") + nla(
            fw.NFTA_EXPR_DATA,
            nla(fw.NFTA_COUNTER_BYTES, octets.to_bytes(8, "big"))
            + nla(fw.NFTA_COUNTER_PACKETS, packets.to_bytes(8, "big")),
        ))  # fmt: skip
        body = nla(fw.NFTA_SET_ELEM_KEY, nla(fw.NFTA_DATA_VALUE, key)) + extra
        return nla(fw.NFTA_LIST_ELEM, body + nla(fw.NFTA_SET_ELEM_EXPRESSIONS, counter))

    same = element(bytes([10, 0, 0, 1]), 5, 500) + element(bytes([10, 0, 0, 2]), 6, 600)
    assert traffic.acct_elements(same) == {"10.0.0.1": [5, 500], "10.0.0.2": [6, 600]}
    # The second element carries a flags attribute: another layout, walked one by one.
    mixed = element(bytes([10, 0, 0, 1]), 5, 500) + element(
        bytes([10, 0, 0, 3]), 7, 700, extra=netlink.nla(3, (0).to_bytes(4, "big"))
    )
    assert traffic.acct_elements(mixed) == {"10.0.0.1": [5, 500], "10.0.0.3": [7, 700]}
    # What a carry reads: the elements that counted something, by either path.
    zero = element(bytes([10, 0, 0, 4]), 0, 0)
    assert traffic.acct_elements(same + zero, counted_only=True) == {
        "10.0.0.1": [5, 500],
        "10.0.0.2": [6, 600],
    }
    assert traffic.acct_elements(mixed + zero, counted_only=True) == {
        "10.0.0.1": [5, 500],
        "10.0.0.3": [7, 700],
    }
    assert traffic.acct_elements(zero + mixed)["10.0.0.4"] == [0, 0]
