"""Conntrack entries with their status bits, read over ctnetlink (run inside a namespace).

    ip netns exec NS python ctdump.py ipv4|ipv6   -> one JSON object per line:
    {"proto": 6, "orig": [src, dst, sport, dport], "reply": [...], "status": int}

`conntrack -L` prints ASSURED, UNREPLIED and OFFLOAD, but not the NAT status bits, and a NAT
null binding (what a connection gets from a NAT hook whose rules did not translate it) is
visible only there: IPS_SRC_NAT_DONE and IPS_DST_NAT_DONE set, IPS_SRC_NAT/IPS_DST_NAT not.
A connection that met no NAT hook at all has neither. Stdlib only.
"""

from __future__ import annotations

import json
import socket
import struct
import sys

NETLINK_NETFILTER = 12
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
IPCTNL_MSG_CT_GET = (1 << 8) | 1  # NFNL_SUBSYS_CTNETLINK, IPCTNL_MSG_CT_GET
CTA_TUPLE_ORIG, CTA_TUPLE_REPLY, CTA_STATUS = 1, 2, 3
CTA_TUPLE_IP, CTA_TUPLE_PROTO = 1, 2
CTA_PROTO_NUM, CTA_PROTO_SRC_PORT, CTA_PROTO_DST_PORT = 1, 2, 3
NLA_TYPE_MASK = 0x3FFF

# include/uapi/linux/netfilter/nf_conntrack_common.h
IPS_SRC_NAT, IPS_DST_NAT = 1 << 4, 1 << 5
IPS_SRC_NAT_DONE, IPS_DST_NAT_DONE = 1 << 7, 1 << 8
NAT_BITS = IPS_SRC_NAT | IPS_DST_NAT | IPS_SRC_NAT_DONE | IPS_DST_NAT_DONE


def attrs(data: bytes) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    i = 0
    while i + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, i)
        if length < 4:
            break
        out[kind & NLA_TYPE_MASK] = data[i + 4 : i + length]
        i += (length + 3) & ~3
    return out


def tuple_of(data: bytes) -> list[object]:
    top = attrs(data)
    ip = attrs(top.get(CTA_TUPLE_IP, b""))
    proto = attrs(top.get(CTA_TUPLE_PROTO, b""))
    if 1 in ip:  # CTA_IP_V4_SRC, CTA_IP_V4_DST
        src, dst = (socket.inet_ntop(socket.AF_INET, ip[k]) for k in (1, 2))
    else:  # CTA_IP_V6_SRC, CTA_IP_V6_DST
        src, dst = (socket.inet_ntop(socket.AF_INET6, ip[k]) for k in (3, 4))
    ports = [
        struct.unpack("!H", proto[k])[0] if k in proto else 0
        for k in (CTA_PROTO_SRC_PORT, CTA_PROTO_DST_PORT)
    ]
    return [src, dst, *ports]


def dump(family: int) -> list[dict[str, object]]:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.settimeout(5)
    body = struct.pack("=BBH", family, 0, 0)
    sock.send(
        struct.pack("=IHHII", 16 + len(body), IPCTNL_MSG_CT_GET, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
        + body
    )
    entries: list[dict[str, object]] = []
    while True:
        data = sock.recv(1 << 16)
        offset = 0
        while offset + 16 <= len(data):
            length, kind, _flags, _seq, _pid = struct.unpack_from("=IHHII", data, offset)
            if kind == NLMSG_DONE:
                return entries
            if kind == NLMSG_ERROR:
                error = struct.unpack_from("=i", data, offset + 16)[0]
                if error:
                    raise OSError(-error, "ctnetlink dump refused")
                return entries
            a = attrs(data[offset + 20 : offset + length])  # after nlmsghdr + nfgenmsg
            proto = attrs(attrs(a[CTA_TUPLE_ORIG]).get(CTA_TUPLE_PROTO, b""))
            entries.append(
                {
                    "proto": proto.get(CTA_PROTO_NUM, b"\0")[0],
                    "orig": tuple_of(a[CTA_TUPLE_ORIG]),
                    "reply": tuple_of(a[CTA_TUPLE_REPLY]),
                    "status": struct.unpack("!I", a[CTA_STATUS])[0],
                }
            )
            offset += (length + 3) & ~3


if __name__ == "__main__":
    for entry in dump(socket.AF_INET6 if sys.argv[1] == "ipv6" else socket.AF_INET):
        sys.stdout.write(json.dumps(entry) + "\n")
