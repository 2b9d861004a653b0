"""portal_fw.elements: the element lines of an increment encoded as nft encodes them, and
everything else left to nft (without a kernel: the set declarations come from a stand-in for
the netlink socket; the lab test test_agent.py proves the bytes against nft's on real tables)."""

from __future__ import annotations

import struct

import pytest

from portal_fw import elements
from portal_fw.elements import NotHandled, encode_value, field_types, parse, plan
from portal_fw.netlink import nla, nla_list

IPV4_SERVICE = (7 << 6) | 13
IPV6_PROTO_SERVICE = (((8 << 6) | 12) << 6) | 13


class Sets:
    """Answers GETSET like the kernel: {name: (flags, key type, key len, data type, len)}."""

    def __init__(self, sets: dict[str, tuple[int, int, int, int | None, int | None]]) -> None:
        self.sets = sets

    def request(self, msg, family=0, attrs=b"", *, dump=True):
        name = dict(nla_list(attrs))[2].rstrip(b"\0").decode()
        if name not in self.sets:
            raise elements.NetlinkError("No such file or directory", 2)
        flags, ktype, klen, dtype, dlen = self.sets[name]
        out = nla(3, struct.pack(">I", flags)) + nla(4, struct.pack(">I", ktype))
        out += nla(5, struct.pack(">I", klen))
        if dtype is not None:
            out += nla(6, struct.pack(">I", dtype)) + nla(7, struct.pack(">I", dlen))
        yield 1, out


SETS = Sets({
    "fwd_tcp": (0x8, IPV4_SERVICE, 8, IPV4_SERVICE, 8),
    "shape4": (0x8, 7, 4, 23, 4),
    "open6_ports": (0x0, IPV6_PROTO_SERVICE, 24, None, None),
    "dev4_pub": (0x0, 7, 4, None, None),
    "mgmt4": (0x4, 7, 4, None, None),  # interval
    "quota_hit4": (0x10 | 0x2000, 7, 4, None, None),  # timeout
})  # fmt: skip


def test_concatenated_types_are_split_six_bits_per_field():
    assert field_types(IPV4_SERVICE) == [7, 13]
    assert field_types(IPV6_PROTO_SERVICE) == [8, 12, 13]


def test_values_are_encoded_as_nft_puts_them_in_registers():
    # A concatenation pads each field to 4 bytes; a port is big-endian, a classid host order.
    assert encode_value(IPV4_SERVICE, 8, ["198.18.0.49", "8088"]) == bytes(
        [198, 18, 0, 49, 0x1F, 0x98, 0, 0]
    )
    assert encode_value(23, 4, ["1:2a"]) == struct.pack("=I", 0x1002A)
    six = encode_value(IPV6_PROTO_SERVICE, 24, ["2001:db8::1", "tcp", "22"])
    assert six[16:] == bytes([6, 0, 0, 0, 0, 22, 0, 0])
    assert encode_value(13, 2, ["53"]) == b"\x00\x35"  # one field: its own length


@pytest.mark.parametrize(
    ("type_id", "length", "tokens"),
    [
        (IPV4_SERVICE, 8, ["198.18.0.49", "http"]),  # service names: nft's own table
        (IPV4_SERVICE, 8, ["198.18.0.49"]),  # a field missing
        (7, 4, ["10.0.0.0/24"]),  # prefixes and ranges belong to interval sets
        (7, 4, ["1.2.3.4-1.2.3.9"]),
        (13, 2, ["70000"]),
        (23, 4, ["root"]),
        (7, 8, ["1.2.3.4"]),  # the kernel's length disagrees: not guessed
        (9, 6, ["aa:bb:cc:dd:ee:ff"]),  # a type this module does not encode
    ],
)
def test_what_is_not_encoded_is_left_to_nft(type_id, length, tokens):
    with pytest.raises(NotHandled):
        encode_value(type_id, length, tokens)


def test_the_compilers_increment_is_parsed_line_by_line():
    text = (
        "# portal increment for host nat1: a -> b\n"
        "delete element inet portal_fw fwd_tcp { 198.18.0.49 . 80 }\n"
        "add element inet portal_fw fwd_tcp { 198.18.0.49 . 8088 : 10.0.1.147 . 80, "
        "198.18.0.48 . 22 : 10.0.1.1 . 22 }\n"
    )
    first, second = parse(text)
    assert (first.verb, first.table, first.name, first.line) == (
        "delete",
        "portal_fw",
        "fwd_tcp",
        2,
    )
    assert first.elements == [(["198.18.0.49", "80"], None)]
    assert second.elements[1] == (["198.18.0.48", "22"], ["10.0.1.1", "22"])


@pytest.mark.parametrize(
    "text",
    [
        "flush set inet portal_fw dev4_pub\n",
        "create element inet portal_fw dev4_pub { 1.2.3.4 }\n",
        "add element inet portal_fw dev4_pub { 1.2.3.4 timeout 1h }\n",
        'add element inet portal_fw dev4_pub { 1.2.3.4 comment "x" }\n',
        "define X = 1.2.3.4\nadd element inet portal_fw dev4_pub { $X }\n",
        "add element inet portal_fw mgmt4 { 10.0.0.0/8 }\n",  # an interval set
        "add element inet portal_fw quota_hit4 { 1.2.3.4 }\n",  # a set with timeouts
        "add element inet portal_fw nosuch { 1.2.3.4 }\n",  # nft names the missing set
        "add element inet portal_fw fwd_tcp { 198.18.0.49 . 80 }\n",  # a map element needs a value
        "add element inet portal_fw dev4_pub { 1.2.3.4 : 5.6.7.8 }\n",  # a set has none
        "add table inet portal_x\n",
        "",
    ],
)
def test_anything_but_plain_elements_of_plain_sets_goes_to_nft(text):
    with pytest.raises(NotHandled):
        plan(SETS, text)


def test_a_batch_has_one_message_per_statement_and_names_its_line():
    text = (
        "delete element inet portal_fw fwd_tcp { 198.18.0.49 . 80 }\n"
        "add element inet portal_fw fwd_tcp { 198.18.0.49 . 8088 : 10.0.1.147 . 80 }\n"
        "add element inet portal_fw shape4 { 10.0.1.147 : 1:10 }\n"
    )
    batch = plan(SETS, text)
    assert [m[0] for m in batch.messages] == [elements.NFT_MSG_DELSETELEM,
                                              elements.NFT_MSG_NEWSETELEM,
                                              elements.NFT_MSG_NEWSETELEM]  # fmt: skip
    assert batch.elements == 3
    assert batch.lines[0] == "line 1: delete element inet portal_fw fwd_tcp"
    # add: create (no EXCL: re-adding an equal element is not an error, as with nft `add`)
    assert batch.messages[1][1] & elements.NLM_F_CREATE
    assert not batch.messages[0][1] & elements.NLM_F_CREATE


def test_the_batch_is_framed_for_the_nftables_subsystem():
    framed = elements.message(elements.NFNL_MSG_BATCH_BEGIN, 1, 7, 0, b"", 10)
    length, msg_type, flags, seq, _pid = struct.unpack_from("=IHHII", framed)
    assert (length, msg_type, flags, seq) == (20, 0x10, 1, 7)
    assert framed[16:20] == bytes([0, 0, 0, 10])  # AF_UNSPEC, version 0, res_id 10 (big-endian)
