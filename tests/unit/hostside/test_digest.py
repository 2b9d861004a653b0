"""portal_fw.netlink, parts and digest: element encoding, order-independent set digests, the
incremental digest moved by element events, the JSON fallback's parts."""

from __future__ import annotations

import random

from portal_fw import digest, netlink, parts
from portal_fw.host import Host


def element(key: bytes, data: bytes, *, expiry: bool = False) -> bytes:
    body = netlink.nla(1, netlink.nla(1, key)) + netlink.nla(2, netlink.nla(1, data))
    if expiry:
        body += netlink.nla(5, (123).to_bytes(8, "big"))  # NFTA_SET_ELEM_EXPIRATION: not content
    return netlink.nla(1, body)


def test_attributes_round_trip():
    encoded = netlink.nla_encode([(1, b"abc"), (3, b"\x00\x00\x00\x05")])
    assert netlink.nla_list(encoded) == [(1, b"abc"), (3, b"\x00\x00\x00\x05")]
    assert netlink.nla_be32(netlink.nla_first(encoded, 3)) == 5
    assert netlink.nla_text(netlink.nla_str(2, "portal_fw")[4:]) == "portal_fw"


def test_the_fast_and_the_slow_element_paths_agree():
    uniform = b"".join(element(bytes([10, 0, 0, i]), bytes([10, 1, 0, i])) for i in range(50))
    fast = netlink.element_payloads(uniform)
    assert len(fast) == 50
    mixed = uniform + element(b"\x0a\x00\x01\x01", b"\x0a\x01\x01\x01", expiry=True)
    slow = netlink.element_payloads(mixed)
    assert slow[:50] == fast
    assert slow[50] == netlink.nla_list(element(b"\x0a\x00\x01\x01", b"\x0a\x01\x01\x01"))[0][1]


def test_a_set_digest_does_not_depend_on_the_order():
    items = [element(bytes([10, 0, i // 256, i % 256]), b"\x01\x02\x03\x04") for i in range(300)]
    shuffled = items[:]
    random.Random(4).shuffle(shuffled)  # noqa: S311 - an order, not a secret
    one = netlink.multiset_sum(netlink.element_payloads(b"".join(items)))
    two = netlink.multiset_sum(netlink.element_payloads(b"".join(shuffled)))
    assert one == two
    fewer = netlink.multiset_sum(netlink.element_payloads(b"".join(items[1:])))
    first = netlink.multiset_sum(netlink.element_payloads(items[0]))
    assert (fewer + first) % netlink.MOD256 == one  # what an element event moves


def test_element_events_move_a_recorded_set_like_a_new_dump(tmp_path):
    host = Host(tmp_path, "t")
    items = [element(bytes([10, 0, 0, i]), b"\x01\x01\x01\x01") for i in range(10)]
    declaration = b"decl"
    total = netlink.multiset_sum(netlink.element_payloads(b"".join(items[:9])))
    record = parts.set_record(declaration, total, 9, 0)
    added = netlink.multiset_sum(netlink.element_payloads(items[9]))
    moved = digest._events_update(
        host,
        {("inet", "portal_fw", "m"): [added, 1]},
        {("inet", "portal_fw", "m")},
        {"nft:inet portal_fw map m": record},
    )
    assert moved is not None
    full = netlink.multiset_sum(netlink.element_payloads(b"".join(items)))
    assert moved[0]["nft:inet portal_fw map m"] == parts.netlink_set_part(declaration, full, 10)
    timeouts = parts.set_record(declaration, total, 9, netlink.NFT_SET_TIMEOUT)
    assert digest._events_update(host, {}, {("inet", "portal_fw", "m")},
                                 {"nft:inet portal_fw map m": timeouts}) is None  # fmt: skip


def test_the_json_fallback_ignores_handles_counters_and_element_order():
    def listing(elements, handle, packets):
        return {"nftables": [
            {"table": {"family": "inet", "name": "portal_fw", "handle": handle}},
            {"chain": {"family": "inet", "table": "portal_fw", "name": "c", "handle": handle}},
            {"rule": {"family": "inet", "table": "portal_fw", "chain": "c", "handle": handle + 1,
                      "expr": [{"counter": {"packets": packets, "bytes": 9}}]}},
            {"set": {"family": "inet", "table": "portal_fw", "name": "s", "type": "ipv4_addr",
                     "handle": handle + 2, "elem": elements}},
        ]}  # fmt: skip

    one = digest.nft_parts([listing(["10.0.0.1", "10.0.0.2"], 1, 5)])
    two = digest.nft_parts([listing(["10.0.0.2", "10.0.0.1"], 7, 99)])
    assert one == two
    assert set(one) == {"nft:inet portal_fw table", "nft:inet portal_fw chain c",
                        "nft:inet portal_fw set s"}  # fmt: skip
    three = digest.nft_parts([listing(["10.0.0.2"], 1, 5)])
    assert three["nft:inet portal_fw set s"] != one["nft:inet portal_fw set s"]
    assert digest.digest_total(one) == digest.digest_total(dict(reversed(one.items())))
