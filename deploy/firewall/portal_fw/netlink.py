"""nf_tables over netlink, stdlib only: GETs and dumps of the portal tables, element events.

nft 1.0.6 loads and prints its whole cache for any list command (40 s, 1.5 GB for 800k
elements); the kernel dumps the same objects as netlink messages in a fraction of that. This
module only reads (no batches). Constants: linux/netlink.h, linux/netfilter/nfnetlink.h,
linux/netfilter/nf_tables.h.
"""

from __future__ import annotations

import array
import contextlib
import hashlib
import os
import socket
import struct
import sys
import time
from collections.abc import Iterable, Iterator
from types import TracebackType

NETLINK_NETFILTER = 12
NFNL_SUBSYS_NFTABLES = 10
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_DUMP_INTR, NLM_F_DUMP = 0x1, 0x2, 0x10, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLA_TYPE_MASK = 0x3FFF
NFT_MSG_GETTABLE, NFT_MSG_GETCHAIN, NFT_MSG_GETRULE, NFT_MSG_GETSET = 1, 4, 7, 10
NFT_MSG_GETSETELEM, NFT_MSG_GETGEN, NFT_MSG_GETOBJ, NFT_MSG_GETFLOWTABLE = 13, 16, 19, 23
NFPROTO = {"inet": 1, "ip": 2, "arp": 3, "netdev": 5, "bridge": 7, "ip6": 10}
NFPROTO_NAMES = {number: name for name, number in NFPROTO.items()}
# attribute numbers (enum nft_*_attributes)
NFTA_TABLE_NAME, NFTA_CHAIN_TABLE, NFTA_CHAIN_NAME = 1, 1, 3
NFTA_RULE_TABLE, NFTA_RULE_CHAIN, NFTA_RULE_EXPRESSIONS = 1, 2, 4
NFTA_SET_TABLE, NFTA_SET_NAME, NFTA_SET_FLAGS, NFTA_SET_EXPR, NFTA_SET_EXPRESSIONS = 1, 2, 3, 17, 18
NFTA_SET_ELEM_LIST_TABLE, NFTA_SET_ELEM_LIST_SET, NFTA_SET_ELEM_LIST_ELEMENTS = 1, 2, 3
NFTA_OBJ_TABLE, NFTA_OBJ_TYPE, NFTA_OBJ_DATA, NFTA_FLOWTABLE_TABLE = 1, 3, 4, 1
NFTA_GEN_ID, NFTA_LIST_ELEM, NFTA_EXPR_NAME, NFTA_EXPR_DATA = 1, 1, 1, 2
NFTA_SET_ELEM_KEY, NFTA_SET_ELEM_EXPR, NFTA_SET_ELEM_EXPRESSIONS, NFTA_DATA_VALUE = 1, 7, 11, 1
NFTA_COUNTER_BYTES, NFTA_COUNTER_PACKETS = 1, 2
NFT_SET_ANONYMOUS, NFT_SET_MAP, NFT_SET_TIMEOUT, NFT_SET_EVAL, NFT_SET_OBJECT, NFT_SET_EXPR = (
    0x1, 0x8, 0x10, 0x20, 0x40, 0x100)  # fmt: skip
NFT_OBJECT_COUNTER, NFT_OBJECT_QUOTA = 1, 2
# What is not content: handles, use counts, transaction ids, padding, the owner's port id,
# base-chain counters; an element's expiry timer and its stateful expressions.
TABLE_VOLATILE = frozenset({3, 4, 5, 7})  # USE HANDLE PAD OWNER
CHAIN_VOLATILE = frozenset({1, 2, 6, 8, 9, 11})  # TABLE HANDLE USE COUNTERS PAD ID
RULE_KEPT = frozenset({4, 5, 7})  # EXPRESSIONS COMPAT USERDATA
# TABLE ID PAD HANDLE, and from kernel 6.x (newer than the Debian 12 headers) 19 NFTA_SET_TYPE
# (the backend the kernel chose) and 20 NFTA_SET_COUNT (the element count: ours is in the part)
SET_VOLATILE = frozenset({1, 10, 14, 16, 19, 20})
ELEM_VOLATILE = frozenset({5, 7, 8, 11})  # EXPIRATION EXPR PAD EXPRESSIONS
OBJ_VOLATILE = frozenset({1, 5, 6, 7})  # TABLE USE HANDLE PAD
FLOWTABLE_VOLATILE = frozenset({1, 4, 5, 6})  # TABLE USE HANDLE PAD

MOD256 = 1 << 256
NLMSGHDR = struct.Struct("=IHHII")
NLA_HDR = struct.Struct("=HH")
NETLINK_RECV_BUFFER = 1 << 20


class NetlinkError(Exception):
    """The kernel refused a request (errno) or answered something unexpected."""

    def __init__(self, message: str, errno_: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno_


class DumpInterrupted(Exception):
    """The rule set changed during a dump (NLM_F_DUMP_INTR or another generation)."""


def align4(n: int) -> int:
    return (n + 3) & ~3


def nla(attr_type: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return NLA_HDR.pack(length, attr_type) + payload + b"\0" * (align4(length) - length)


def nla_str(attr_type: int, text: str) -> bytes:
    return nla(attr_type, text.encode() + b"\0")


def nla_list(data: bytes) -> list[tuple[int, bytes]]:
    """The attributes in `data`: (type without the NESTED/BYTEORDER flags, payload)."""
    out: list[tuple[int, bytes]] = []
    offset, end = 0, len(data)
    while offset + 4 <= end:
        length, attr_type = NLA_HDR.unpack_from(data, offset)
        if length < 4:
            break
        out.append((attr_type & NLA_TYPE_MASK, data[offset + 4 : offset + length]))
        offset += align4(length)
    return out


def nla_first(data: bytes, wanted: int) -> bytes | None:
    for attr_type, payload in nla_list(data):
        if attr_type == wanted:
            return payload
    return None


def nla_text(payload: bytes | None) -> str | None:
    return None if payload is None else payload.split(b"\0", 1)[0].decode(errors="replace")


def nla_be32(payload: bytes | None) -> int:
    return int.from_bytes(payload[:4], "big") if payload else 0


def nla_encode(attrs: Iterable[tuple[int, bytes]]) -> bytes:
    return b"".join(nla(attr_type, payload) for attr_type, payload in attrs)


class NftNetlink:
    """A NETLINK_NETFILTER socket that dumps nf_tables objects (no batches: GETs only)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        with contextlib.suppress(OSError):
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.bind((0, 0))
        self.seq = int(time.time()) & 0xFFFF
        self.buffer = bytearray(NETLINK_RECV_BUFFER)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> NftNetlink:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def request(
        self, msg: int, family: int = 0, attrs: bytes = b"", *, dump: bool = True
    ) -> Iterator[tuple[int, bytes]]:
        """Send one GET; yield (nfgenmsg family, attribute payload) of each answer.
        A dump runs to NLMSG_DONE; NLM_F_DUMP_INTR raises DumpInterrupted at the end."""
        self.seq += 1
        seq = self.seq
        flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else 0)
        body = struct.pack("=BBH", family, 0, 0) + attrs
        header = NLMSGHDR.pack(16 + len(body), (NFNL_SUBSYS_NFTABLES << 8) | msg, flags, seq, 0)
        self.sock.send(header + body)
        interrupted = False
        buffer = self.buffer
        view = memoryview(buffer)
        while True:
            size = self.sock.recv_into(buffer, 0, socket.MSG_TRUNC)
            if size > len(buffer):
                raise NetlinkError(f"netlink message of {size} bytes truncated")
            offset = 0
            while offset + 16 <= size:
                length, msg_type, msg_flags, msg_seq, _pid = NLMSGHDR.unpack_from(buffer, offset)
                if length < 16 or offset + length > size:
                    raise NetlinkError("malformed netlink message")
                start, offset = offset, offset + align4(length)
                if msg_seq != seq:
                    continue  # an answer to an earlier request that was not read to its end
                if msg_type == NLMSG_DONE:
                    if interrupted:
                        raise DumpInterrupted("the rule set changed during the dump")
                    return
                if msg_type == NLMSG_ERROR:
                    (error,) = struct.unpack_from("=i", buffer, start + 16)
                    if error:
                        raise NetlinkError(os.strerror(-error), -error)
                    return  # an ACK
                if msg_flags & NLM_F_DUMP_INTR:
                    interrupted = True
                yield buffer[start + 16], bytes(view[start + 20 : start + length])
                if not dump and not msg_flags & NLM_F_MULTI:
                    return

    def generation(self) -> int:
        for _family, payload in self.request(NFT_MSG_GETGEN, dump=False):
            return nla_be32(nla_first(payload, NFTA_GEN_ID))
        raise NetlinkError("no answer to GETGEN")

    def dump(self, msg: int, family: int, attrs: bytes = b"") -> list[list[tuple[int, bytes]]]:
        return [nla_list(payload) for _family, payload in self.request(msg, family, attrs)]


NFNLGRP_NFTABLES = 7
SOL_NETLINK, NETLINK_ADD_MEMBERSHIP = 270, 1
NFT_MSG_NEWSETELEM, NFT_MSG_NEWGEN, NFT_MSG_DELSETELEM = 12, 15, 14
EVENTS_RECV_BUFFER = 64 << 20


def element_payloads(elements: bytes) -> list[bytes]:
    """The canonical bytes of each element in one NFTA_SET_ELEM_LIST_ELEMENTS payload: its
    attributes (key, key end, flags, data/verdict, timeout, userdata, objref) as the kernel
    encodes them, without expiry timer and stateful expressions.

    Fast path: when every element has the same length and the same top-level attribute
    headers as the first (checked with strided slices, in C) and the first has no volatile
    attribute, the elements are sliced out as they are; otherwise walked one by one."""
    size = len(elements)
    if size < 4:
        return []
    first_len = NLA_HDR.unpack_from(elements, 0)[0]
    stride = align4(first_len)
    if first_len >= 4 and size % stride == 0:
        count = size // stride
        headers = [0, 1, 2, 3]
        offset, uniform = 4, True
        while offset + 4 <= first_len:
            length, attr_type = NLA_HDR.unpack_from(elements, offset)
            if length < 4 or (attr_type & NLA_TYPE_MASK) in ELEM_VOLATILE:
                uniform = False
                break
            headers += range(offset, offset + 4)
            offset += align4(length)
        if uniform and all(elements[h::stride] == elements[h : h + 1] * count for h in headers):
            return [elements[i + 4 : i + first_len] for i in range(0, size, stride)]
    out: list[bytes] = []
    for _, element in nla_list(elements):
        parts: list[bytes] = []
        offset, dropped = 0, False
        while offset + 4 <= len(element):
            length, attr_type = NLA_HDR.unpack_from(element, offset)
            if length < 4:
                break
            if (attr_type & NLA_TYPE_MASK) in ELEM_VOLATILE:
                dropped = True
            else:
                parts.append(element[offset : offset + align4(length)])
            offset += align4(length)
        out.append(b"".join(parts) if dropped else element)
    return out


def multiset_sum(payloads: list[bytes]) -> int:
    """sum(int.from_bytes(sha256(p), "little")) mod 2**256, summed in four 64-bit lanes."""
    sha = hashlib.sha256
    lanes = array.array("Q")
    lanes.frombytes(b"".join([sha(p).digest() for p in payloads]))
    if sys.byteorder == "big":
        lanes.byteswap()
    total = 0
    for k in range(4):
        total += sum(lanes[k::4]) << (64 * k)
    return total % MOD256


class ElementEvents:
    """Listens to the kernel's nf_tables notifications (NFNLGRP_NFTABLES) around one load:
    each committed NEWSETELEM/DELSETELEM carries the elements exactly as a dump encodes them,
    so the multiset sum of a set can be moved by them instead of dumping the set again."""

    def __init__(self) -> None:
        self.nl = NftNetlink()
        sock = self.nl.sock
        try:
            sock.setsockopt(socket.SOL_SOCKET, 33, EVENTS_RECV_BUFFER)  # SO_RCVBUFFORCE (root)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, EVENTS_RECV_BUFFER)
        sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, NFNLGRP_NFTABLES)

    def close(self) -> None:
        self.nl.close()

    def drain(self) -> None:
        """Drop every notification queued so far (and a lost-events error): what `collect`
        reads next comes after this call."""
        sock, buffer = self.nl.sock, self.nl.buffer
        sock.setblocking(False)
        while True:
            try:
                sock.recv_into(buffer, 0)
            except BlockingIOError:
                return
            except OSError:  # ENOBUFS: reported once, then the queue reads on
                continue

    def collect(self) -> dict[tuple[str, str, str], list[int]] | None:
        """{(family, table, set): [sum delta, count delta]} of what was committed since the
        socket was opened or drained; None when anything else changed, a notification was lost (ENOBUFS)
        or no commit was seen (then the caller dumps)."""
        sock, buffer = self.nl.sock, self.nl.buffer
        sock.setblocking(False)
        deltas: dict[tuple[str, str, str], list[int]] = {}
        committed = False
        while True:
            try:
                size = sock.recv_into(buffer, 0, socket.MSG_TRUNC)
            except BlockingIOError:
                break
            except OSError:  # ENOBUFS: the queue overflowed, events were lost
                return None
            if size > len(buffer):
                return None
            offset = 0
            while offset + 16 <= size:
                length, msg_type, _flags, _seq, _pid = NLMSGHDR.unpack_from(buffer, offset)
                if length < 16 or offset + length > size:
                    return None
                family, start = buffer[offset + 16], offset
                offset += align4(length)
                if msg_type >> 8 != NFNL_SUBSYS_NFTABLES:
                    continue
                msg = msg_type & 0xFF
                if msg == NFT_MSG_NEWGEN:
                    committed = True
                    continue
                if msg not in (NFT_MSG_NEWSETELEM, NFT_MSG_DELSETELEM):
                    return None  # a rule, chain, set, table, object changed: read it all
                attrs = dict(nla_list(bytes(buffer[start + 20 : start + length])))
                key = (
                    NFPROTO_NAMES.get(family, str(family)),
                    nla_text(attrs.get(NFTA_SET_ELEM_LIST_TABLE)) or "",
                    nla_text(attrs.get(NFTA_SET_ELEM_LIST_SET)) or "",
                )
                canon = element_payloads(attrs.get(NFTA_SET_ELEM_LIST_ELEMENTS) or b"")
                sign = 1 if msg == NFT_MSG_NEWSETELEM else -1
                delta = deltas.setdefault(key, [0, 0])
                delta[0] += sign * multiset_sum(canon)
                delta[1] += sign * len(canon)
        return deltas if committed else None
