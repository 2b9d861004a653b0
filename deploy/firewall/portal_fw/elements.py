"""Element-only increments applied over netlink as ONE nf_tables batch, no nft process.

The portal's steady change is a few `add element` / `delete element` lines (workers/ruleset/
diff.py). nft 1.0.6 needs 10-20 ms per run for them (process start, its cache of the sets);
the kernel needs well under one. This module parses exactly the element lines the compiler
writes, encodes each value as nft does for the set's declared types (read from the kernel with
GETSET), and sends every statement in one batch (NFNL_MSG_BATCH_BEGIN .. END, one sendmsg):
the kernel commits the batch whole or aborts it whole, so a refused increment (an element that
is not there, a key that is, a set that does not exist) leaves the tables as they were.

Anything else (interval, timeout or object sets, other value types, names of services,
`create`/`destroy`/`flush`, defines) is not guessed: `plan` answers None and the caller loads
the text with nft. Types (nftables' datatype ids, concatenations 6 bits per field):
ipv4_addr 7, ipv6_addr 8, inet_proto 12, inet_service 13, classid 23; a field of a
concatenation is padded to 4 bytes, as in nft's registers.
"""

from __future__ import annotations

import contextlib
import errno as errno_codes
import os
import re
import socket
import struct
from dataclasses import dataclass, field

from .netlink import (
    NFPROTO,
    NFT_MSG_GETSET,
    NFT_SET_MAP,
    NFTA_LIST_ELEM,
    NFTA_SET_ELEM_LIST_ELEMENTS,
    NFTA_SET_ELEM_LIST_SET,
    NFTA_SET_ELEM_LIST_TABLE,
    NFTA_SET_FLAGS,
    NFTA_SET_NAME,
    NFTA_SET_TABLE,
    NLMSGHDR,
    SOL_NETLINK,
    NetlinkError,
    NftNetlink,
    align4,
    nla,
    nla_be32,
    nla_list,
    nla_str,
)

NFNL_SUBSYS_NFTABLES = 10
NFNL_MSG_BATCH_BEGIN, NFNL_MSG_BATCH_END = 0x10, 0x11
NFT_MSG_NEWSETELEM, NFT_MSG_DELSETELEM = 12, 14
NLM_F_REQUEST, NLM_F_ACK, NLM_F_CREATE = 0x1, 0x4, 0x400
NLMSG_ERROR = 2
NLA_F_NESTED = 0x8000
NETLINK_CAP_ACK = 10
SO_SNDBUFFORCE = 32
NFTA_SET_KEY_TYPE, NFTA_SET_KEY_LEN, NFTA_SET_DATA_TYPE, NFTA_SET_DATA_LEN = 4, 5, 6, 7
NFTA_SET_ELEM_KEY, NFTA_SET_ELEM_DATA, NFTA_DATA_VALUE = 1, 2, 1
# Sets whose elements carry more than key and value, or that nft treats specially.
NFT_SET_ANONYMOUS, NFT_SET_CONSTANT, NFT_SET_INTERVAL = 0x1, 0x2, 0x4
NFT_SET_TIMEOUT, NFT_SET_EVAL, NFT_SET_OBJECT, NFT_SET_CONCAT = 0x10, 0x20, 0x40, 0x80
UNSUPPORTED_FLAGS = (NFT_SET_ANONYMOUS | NFT_SET_CONSTANT | NFT_SET_INTERVAL | NFT_SET_TIMEOUT
                     | NFT_SET_EVAL | NFT_SET_OBJECT | NFT_SET_CONCAT)  # fmt: skip
TYPE_BITS = 6
TYPE_IPADDR, TYPE_IP6ADDR, TYPE_INET_PROTOCOL, TYPE_INET_SERVICE, TYPE_CLASSID = 7, 8, 12, 13, 23
TYPE_LEN = {TYPE_IPADDR: 4, TYPE_IP6ADDR: 16, TYPE_INET_PROTOCOL: 1, TYPE_INET_SERVICE: 2,
            TYPE_CLASSID: 4}  # fmt: skip
PROTOCOLS = {"icmp": 1, "igmp": 2, "tcp": 6, "udp": 17, "gre": 47, "esp": 50, "ah": 51,
             "icmpv6": 58, "ipv6-icmp": 58, "sctp": 132, "udplite": 136, "dccp": 33}  # fmt: skip
MAX_BATCH_BYTES = 16 << 20  # larger increments go to nft (they are not the steady change)
ELEMENTS_PER_MESSAGE = 1000

LINE = re.compile(
    r"(add|delete) element (inet|ip|ip6) ([A-Za-z0-9_]{1,64}) ([A-Za-z0-9_]{1,64}) "
    r"\{ ([^{}#;\"]+) \}"
)
DECIMAL = re.compile(r"[0-9]{1,5}")
CLASSID = re.compile(r"([0-9a-fA-F]{1,4}):([0-9a-fA-F]{1,4})")


class NotHandled(Exception):
    """The text or a set is outside what this module encodes: nft loads it instead."""


@dataclass
class Statement:
    line: int
    verb: str
    family: str
    table: str
    name: str
    elements: list[tuple[list[str], list[str] | None]] = field(default_factory=list)


def parse(text: str) -> list[Statement]:
    """The element statements of an increment (raises NotHandled for anything else)."""
    out: list[Statement] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = LINE.fullmatch(line)
        if match is None:
            raise NotHandled(f"line {number}: not a plain element statement")
        verb, family, table, name, body = match.groups()
        statement = Statement(number, verb, family, table, name)
        for item in body.split(", "):
            key, sep, value = item.partition(" : ")
            if " : " in value:
                raise NotHandled(f"line {number}: element {item!r}")
            statement.elements.append((key.split(" . "), value.split(" . ") if sep else None))
        out.append(statement)
    return out


def field_types(type_id: int) -> list[int]:
    """The datatypes of a (concatenated) set key or map value, first field first."""
    types: list[int] = []
    while type_id:
        types.insert(0, type_id & ((1 << TYPE_BITS) - 1))
        type_id >>= TYPE_BITS
    return types


def encode_field(type_id: int, token: str) -> bytes:
    try:
        if type_id == TYPE_IPADDR:
            return socket.inet_pton(socket.AF_INET, token)
        if type_id == TYPE_IP6ADDR:
            return socket.inet_pton(socket.AF_INET6, token)
    except OSError:
        raise NotHandled(f"not an address: {token!r}") from None
    if type_id == TYPE_INET_PROTOCOL:
        number = PROTOCOLS.get(token)
        if number is None and DECIMAL.fullmatch(token) and int(token) <= 255:
            number = int(token)
        if number is None:
            raise NotHandled(f"protocol {token!r}")
        return bytes([number])
    if type_id == TYPE_INET_SERVICE:
        if not DECIMAL.fullmatch(token) or int(token) > 65535:
            raise NotHandled(f"port {token!r}")
        return int(token).to_bytes(2, "big")
    if type_id == TYPE_CLASSID:
        match = CLASSID.fullmatch(token)
        if match is None:
            raise NotHandled(f"classid {token!r}")
        major, minor = (int(part, 16) for part in match.groups())
        return struct.pack("=I", (major << 16) | minor)  # host byte order, as tc's handles
    raise NotHandled(f"datatype {type_id}")


def encode_value(type_id: int, length: int, tokens: list[str]) -> bytes:
    """The register bytes of a key or value: one field as it is, a concatenation padded to 4
    bytes per field. NotHandled when the types or the length do not match the kernel's."""
    types = field_types(type_id)
    if len(types) != len(tokens) or any(t not in TYPE_LEN for t in types):
        raise NotHandled(f"{len(tokens)} fields for type {type_id}")
    if len(types) == 1:
        data = encode_field(types[0], tokens[0])
    else:
        data = b"".join(
            encoded + b"\0" * (align4(len(encoded)) - len(encoded))
            for encoded in (encode_field(t, token) for t, token in zip(types, tokens, strict=True))
        )
    if len(data) != length:
        raise NotHandled(f"{len(data)} bytes for a {length}-byte field")
    return data


@dataclass(frozen=True)
class SetDecl:
    flags: int
    key_type: int
    key_len: int
    data_type: int | None
    data_len: int | None


def declaration(nl: NftNetlink, family: int, table: str, name: str) -> SetDecl:
    attrs = nla_str(NFTA_SET_TABLE, table) + nla_str(NFTA_SET_NAME, name)
    try:
        for _family, payload in nl.request(NFT_MSG_GETSET, family, attrs, dump=False):
            a = dict(nla_list(payload))
            mapped = NFTA_SET_DATA_TYPE in a
            return SetDecl(
                nla_be32(a.get(NFTA_SET_FLAGS)),
                nla_be32(a.get(NFTA_SET_KEY_TYPE)),
                nla_be32(a.get(NFTA_SET_KEY_LEN)),
                nla_be32(a.get(NFTA_SET_DATA_TYPE)) if mapped else None,
                nla_be32(a.get(NFTA_SET_DATA_LEN)) if mapped else None,
            )
    except NetlinkError as exc:
        if exc.errno == errno_codes.ENOENT:  # nft would refuse the whole text the same way
            raise NotHandled(f"no set {table} {name}") from None
        raise
    raise NotHandled(f"no answer for set {table} {name}")


def element_attrs(decl: SetDecl, key: list[str], value: list[str] | None, verb: str) -> bytes:
    mapped = bool(decl.flags & NFT_SET_MAP)
    if decl.flags & UNSUPPORTED_FLAGS:
        raise NotHandled(f"set flags {decl.flags:#x}")
    attrs = nla(NFTA_SET_ELEM_KEY | NLA_F_NESTED,
                nla(NFTA_DATA_VALUE, encode_value(decl.key_type, decl.key_len, key)))  # fmt: skip
    if value is not None:
        if not mapped or decl.data_type is None or decl.data_len is None:
            raise NotHandled("a value for a set that is not a map")
        data = encode_value(decl.data_type, decl.data_len, value)
        attrs += nla(NFTA_SET_ELEM_DATA | NLA_F_NESTED, nla(NFTA_DATA_VALUE, data))
    elif mapped and verb == "add":
        raise NotHandled("a map element without a value")
    return nla(NFTA_LIST_ELEM | NLA_F_NESTED, attrs)


@dataclass
class Batch:
    """The encoded messages of one increment; `lines[i]` is the text line of message i."""

    messages: list[tuple[int, int, int, bytes]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    elements: int = 0


def plan(nl: NftNetlink, text: str) -> Batch:
    """Encode the increment (raises NotHandled when nft must load it)."""
    batch = Batch()
    decls: dict[tuple[str, str, str], SetDecl] = {}
    for st in parse(text):
        family = NFPROTO[st.family]
        where = (st.family, st.table, st.name)
        if where not in decls:
            decls[where] = declaration(nl, family, st.table, st.name)
        encoded = [element_attrs(decls[where], k, v, st.verb) for k, v in st.elements]
        msg = NFT_MSG_NEWSETELEM if st.verb == "add" else NFT_MSG_DELSETELEM
        flags = NLM_F_REQUEST | NLM_F_ACK | (NLM_F_CREATE if st.verb == "add" else 0)
        head = nla_str(NFTA_SET_ELEM_LIST_TABLE, st.table) + nla_str(
            NFTA_SET_ELEM_LIST_SET, st.name
        )
        for start in range(0, len(encoded), ELEMENTS_PER_MESSAGE):
            chunk = b"".join(encoded[start : start + ELEMENTS_PER_MESSAGE])
            body = head + nla(NFTA_SET_ELEM_LIST_ELEMENTS | NLA_F_NESTED, chunk)
            batch.messages.append((msg, flags, family, body))
            batch.lines.append(f"line {st.line}: {st.verb} element {st.family} {st.table} "
                               f"{st.name}")  # fmt: skip
        batch.elements += len(encoded)
    if not batch.messages:
        raise NotHandled("no element statement")
    return batch


def message(
    msg_type: int, flags: int, seq: int, family: int, body: bytes, res_id: int = 0
) -> bytes:
    payload = struct.pack("=BBH", family, 0, socket.htons(res_id)) + body
    return NLMSGHDR.pack(16 + len(payload), msg_type, flags, seq, 0) + payload


class Refused(Exception):
    """The kernel refused the batch: nothing of it was committed."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Unknown(Exception):
    """No complete answer to the batch: whether it was committed is not known."""


def send(nl: NftNetlink, batch: Batch) -> None:
    """Send the batch in one sendmsg and read the kernel's answer to each message."""
    sock = nl.sock
    with contextlib.suppress(OSError):
        sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)  # errors without the request echoed
    seq0 = nl.seq + 1
    parts = [message(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, seq0, 0, b"", NFNL_SUBSYS_NFTABLES)]
    for i, (msg, flags, family, body) in enumerate(batch.messages, start=1):
        parts.append(message((NFNL_SUBSYS_NFTABLES << 8) | msg, flags, seq0 + i, family, body))
    end_seq = seq0 + len(batch.messages) + 1
    parts.append(message(NFNL_MSG_BATCH_END, NLM_F_REQUEST, end_seq, 0, b"", NFNL_SUBSYS_NFTABLES))
    nl.seq = end_seq
    data = b"".join(parts)
    if len(data) > MAX_BATCH_BYTES:
        raise NotHandled(f"a batch of {len(data)} bytes")
    if len(data) > 128 << 10:
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, len(data) + (64 << 10))
        except OSError:
            raise NotHandled("no socket buffer for a large batch") from None
    sock.send(data)  # the kernel runs the whole batch inside this call
    answered: dict[int, int] = {}
    count = len(batch.messages)
    try:
        sock.settimeout(5.0)
        while sum(0 <= i < count for i in answered) < count and not any(answered.values()):
            read_answers(nl, seq0, end_seq, answered)
        if any(answered.values()):
            # An aborted batch is answered at once: read what is queued, report each refusal.
            sock.settimeout(0.05)
            with contextlib.suppress(OSError):
                while sum(0 <= i < count for i in answered) < count:
                    read_answers(nl, seq0, end_seq, answered)
    except TimeoutError:
        raise Unknown(f"{len(answered)} of {count} messages answered") from None
    finally:
        sock.settimeout(None)
    failures = sorted((i, code) for i, code in answered.items() if code)
    if failures:
        lines = ["the batch", *batch.lines, "the batch"]  # index -1: its begin, count: its end
        raise Refused("\n".join(f"{lines[i + 1]}: {os.strerror(code)}" for i, code in failures))


def read_answers(nl: NftNetlink, seq0: int, end_seq: int, answered: dict[int, int]) -> None:
    """One recv: the errno (0: ack) of each message of the batch it holds, by index (-1: the
    batch's begin)."""
    size = nl.sock.recv_into(nl.buffer)
    offset = 0
    while offset + 16 <= size:
        length, msg_type, _flags, seq, _pid = NLMSGHDR.unpack_from(nl.buffer, offset)
        if length < 16:
            break
        if msg_type == NLMSG_ERROR and seq0 <= seq <= end_seq:
            (code,) = struct.unpack_from("=i", nl.buffer, offset + 16)
            answered[seq - seq0 - 1] = -code
        offset += align4(length)
