"""Snapshot -> IR: one small function per concern, all output in canonical order.

The structure (tables, chains, rules, set definitions, shaper roots) depends only on the host and
never on member data, so every change of members, devices, forwards, openings or shaping is an
element change that `diff` can apply incrementally. Per-packet work is a fixed handful of rules
and set/map lookups, whatever the number of members:

    forward:   ct established,related accept -> ct invalid drop -> management accept ->
               from members: anti-spoofing (saddr must be a device address), blocked ports ->
               to members: DNATed, or IPv6 opening (address . proto . port / range / all)
    prerouting (mangle): new inbound to a blocked port dropped before DNAT
    dstnat:    dnat via map ip daddr . meta l4proto . th dport (hash map; equal ranges in an
               interval map; shifted ranges expanded to single ports, nft has no offset NAT)
    srcnat:    snat via map device address -> member's public IPv4 (the same map is the IPv4
               anti-spoofing set: a device of a member without public IPv4 cannot send through)
    shaping:   meta priority set ip(6) daddr/saddr map @shape4/@shape6 -> HTB leaf class, no filters
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable

from workers.ruleset.ir import Chain, HtbClass, Ruleset, SetDef, Shaper, Table
from workers.ruleset.snapshot import _L4 as _L4
from workers.ruleset.snapshot import (
    Host,
    Member,
    Policy,
    PortRange,
    PortRule,
    Protocol,
    ShapingRoot,
    Snapshot,
    SnapshotError,
)

TABLE_FAMILY = "inet"
TABLE_NAME = "portal_fw"  # the firewall helper accepts only tables named portal_*
VERSION_SET = "version"

HTB_ROOT_MAJOR = 0x1
MQ_QUEUE_MAJOR_BASE = 0x100  # the HTB under mq queue q gets handle (0x100 + q):
DEFAULT_MINOR = 0x2  # unshaped traffic
FIRST_MEMBER_MINOR = 0x10
MINOR_SPACE = 0xFFF0 - FIRST_MEMBER_MINOR  # member minors 0x10..0xffef

_unpack4 = struct.Struct(">4B").unpack
_unpack6 = struct.Struct(">8H").unpack
_ZERO_RUNS = tuple(":" + "0:" * n for n in range(6, 1, -1))  # ":0:0:0:0:0:0:" .. ":0:0:"
_MEMO_LIMIT = 500_000  # spellings per family kept between compiles (~50 MB at most)
_TEXT4: dict[int, str] = {}
_TEXT6: dict[int, str] = {}


def _spell4(n: int) -> str:
    if len(_TEXT4) >= _MEMO_LIMIT:
        _TEXT4.clear()
    s = _TEXT4[n] = "%d.%d.%d.%d" % _unpack4(n.to_bytes(4, "big"))  # noqa: UP031
    return s


def _spell6(n: int) -> str:
    if len(_TEXT6) >= _MEMO_LIMIT:
        _TEXT6.clear()
    s = "%x:%x:%x:%x:%x:%x:%x:%x" % _unpack6(n.to_bytes(16, "big"))  # noqa: UP031
    for run in _ZERO_RUNS:  # compress the longest inner zero run (nft accepts either spelling)
        if run in s:
            s = s.replace(run, "::", 1)
            break
    _TEXT6[n] = s
    return s


def fmt4(address: ipaddress.IPv4Address) -> str:
    """Dotted quad, memoised by value for the life of the process.

    A compile spells ~140,000 addresses and str() costs 1-5 us each on this machine; a worker
    compiles the same addresses again and again, so spellings are memoised (bounded).
    `_ip` is ipaddress's integer value (int() without a Python-level dunder call); a unit test
    guards it.
    """
    n = address._ip
    return _TEXT4.get(n) or _spell4(n)


def fmt6(address: ipaddress.IPv6Address) -> str:
    """IPv6 with one inner zero run compressed, memoised (see fmt4)."""
    n = address._ip
    return _TEXT6.get(n) or _spell6(n)


def class_minors(member_ids: Iterable[int]) -> dict[int, int]:
    """Stable HTB minor per shaped member, derived from the member id (not list position).

    Ids 1..65504 map one to one (minor = 0x10 + id - 1); larger ids wrap around and, on a
    collision, probe upwards in ascending member-id order. A member therefore keeps its class
    across compiles; only wrapped ids (above 65504) can ever move, and only on a collision.
    """
    taken: set[int] = set()
    result: dict[int, int] = {}
    for mid in sorted(member_ids):
        slot = (mid - 1) % MINOR_SPACE
        if slot in taken:
            for _ in range(MINOR_SPACE):
                slot = (slot + 1) % MINOR_SPACE
                if slot not in taken:
                    break
            else:
                raise SnapshotError(f"member #{mid}: more than {MINOR_SPACE} shaped members")
        taken.add(slot)
        result[mid] = FIRST_MEMBER_MINOR + slot
    return result


def class_major(host: Host, member_id: int) -> int:
    """HTB major of a member's class: the single root, or the HTB of its mq queue."""
    if host.shaping_root is ShapingRoot.MQ:
        return MQ_QUEUE_MAJOR_BASE + member_id % host.tx_queues
    return HTB_ROOT_MAJOR


def merge_ranges(ranges: Iterable[PortRange]) -> list[PortRange]:
    """Sorted union of port ranges, overlapping and adjacent ones merged (interval sets need it)."""
    out: list[PortRange] = []
    for r in sorted(ranges):
        if out and r.first <= out[-1].last + 1:
            if r.last > out[-1].last:
                out[-1] = PortRange(out[-1].first, r.last)
        else:
            out.append(r)
    return out


def _ifset(names: tuple[str, ...]) -> str:
    quoted = ", ".join(f'"{n}"' for n in names)
    return f'"{names[0]}"' if len(names) == 1 else f"{{ {quoted} }}"


# ------------------------------------------------------------------------------------ concerns


def _port_rule_elements(rules: tuple[PortRule, ...]) -> tuple[str, ...]:
    per_proto: dict[str, list[PortRange]] = {}
    for r in rules:
        for p in r.protocol.l4:
            per_proto.setdefault(p, []).append(r.ports)
    return tuple(f"{p} . {r}" for p in sorted(per_proto) for r in merge_ranges(per_proto[p]))


def policy_sets(policy: Policy) -> list[SetDef]:
    """Management networks and blocked ports: small interval sets."""
    nets4 = [n for n in policy.management_networks if n.version == 4]
    nets6 = [n for n in policy.management_networks if n.version == 6]
    mgmt4 = tuple(str(n) for n in ipaddress.collapse_addresses(nets4))  # type: ignore[arg-type]
    mgmt6 = tuple(str(n) for n in ipaddress.collapse_addresses(nets6))  # type: ignore[arg-type]
    port_key = "inet_proto . inet_service"
    interval = ("interval",)
    return [
        SetDef("blocked_in", port_key, None, interval, _port_rule_elements(policy.blocked_inbound)),
        SetDef(
            "blocked_out", port_key, None, interval, _port_rule_elements(policy.blocked_outbound)
        ),
        SetDef("mgmt4", "ipv4_addr", None, interval, mgmt4),
        SetDef("mgmt6", "ipv6_addr", None, interval, mgmt6),
    ]


def member_sets(snapshot: Snapshot) -> list[SetDef]:
    """All per-member elements in one pass over the members (the hot loop of the compiler)."""
    host = snapshot.host
    fwd_ports: list[str] = []
    fwd_ranges: list[str] = []
    src_nat: list[str] = []
    src6: list[str] = []
    open_all: list[str] = []
    open_ports: list[str] = []
    open_ranges: list[str] = []
    shape4: list[str] = []
    shape6: list[str] = []
    minors = class_minors(m.id for m in snapshot.members if m.shaping is not None)
    mq = host.shaping_root is ShapingRoot.MQ
    queues = host.tx_queues
    l4 = _L4
    get4 = _TEXT4.get
    get6 = _TEXT6.get
    for m in snapshot.members:
        pub = m.public_ipv4
        if pub is not None:
            pub = get4(pub._ip) or _spell4(pub._ip)
        dev4: dict[int, str] = {}
        dev6: dict[int, list[str]] = {}
        for d in m.devices:
            a6 = [get6(a._ip) or _spell6(a._ip) for a in d.ipv6]
            dev6[d.id] = a6
            src6 += a6
            a4 = d.ipv4
            if a4 is not None:
                dev4[d.id] = get4(a4._ip) or _spell4(a4._ip)
        if pub is not None:
            src_nat += [f"{a4} : {pub}" for a4 in dev4.values()]
        if m.shaping is not None:
            major = MQ_QUEUE_MAJOR_BASE + m.id % queues if mq else HTB_ROOT_MAJOR
            classid = f"{major:x}:{minors[m.id]:x}"
            shape4 += [f"{a4} : {classid}" for a4 in dev4.values()]
            shape6 += [f"{a} : {classid}" for a6 in dev6.values() for a in a6]
        for f in m.forwards:
            if not f.enabled:
                continue
            pp = f.public_ports
            tp = f.target_ports
            first = pp.first
            if first == pp.last:
                target = f"{dev4[f.device_id]} . {tp.first}"
                fwd_ports += [f"{pub} . {proto} . {first} : {target}" for proto in l4[f.protocol]]
            elif first == tp.first:
                target = dev4[f.device_id]
                fwd_ranges += [
                    f"{pub} . {proto} . {first}-{pp.last} : {target}" for proto in l4[f.protocol]
                ]
            else:  # nft has no offset NAT: a shifted range becomes single ports
                target = dev4[f.device_id]
                shift = tp.first - first
                fwd_ports += [
                    f"{pub} . {proto} . {port} : {target} . {port + shift}"
                    for proto in l4[f.protocol]
                    for port in range(first, pp.last + 1)
                ]
        if m.openings:
            _openings(m, dev6, open_all, open_ports, open_ranges)
    v4_port = "ipv4_addr . inet_proto . inet_service"
    v6_port = "ipv6_addr . inet_proto . inet_service"
    interval = ("interval",)
    return [
        SetDef("fwd_ports", v4_port, "ipv4_addr . inet_service", (), tuple(fwd_ports)),
        SetDef("fwd_ranges", v4_port, "ipv4_addr", interval, tuple(fwd_ranges)),
        SetDef("open6_all", "ipv6_addr", None, (), tuple(open_all)),
        SetDef("open6_ports", v6_port, None, (), tuple(open_ports)),
        SetDef("open6_ranges", v6_port, None, interval, tuple(open_ranges)),
        SetDef("shape4", "ipv4_addr", "classid", (), tuple(shape4)),
        SetDef("shape6", "ipv6_addr", "classid", (), tuple(shape6)),
        SetDef("src6", "ipv6_addr", None, (), tuple(src6)),
        SetDef("src_nat", "ipv4_addr", "ipv4_addr", (), tuple(src_nat)),
    ]


def _openings(
    m: Member,
    dev6: dict[int, list[str]],
    open_all: list[str],
    open_ports: list[str],
    open_ranges: list[str],
) -> None:
    """IPv6 openings of one member: all-ports devices, merged ranges, single ports."""
    if len(m.openings) == 1:  # the common case: nothing to merge
        o = m.openings[0]
        addrs = dev6[o.device_id]
        r = o.ports
        if r is None:
            if o.protocol is Protocol.BOTH:
                open_all += addrs
                return
            r = PortRange(1, 65535)
        for proto in _L4[o.protocol]:
            if r.first == r.last:
                open_ports += [f"{a} . {proto} . {r.first}" for a in addrs]
            else:
                open_ranges += [f"{a} . {proto} . {r.first}-{r.last}" for a in addrs]
        return
    per_device: dict[int, dict[str, list[PortRange]]] = {}
    everything: set[int] = set()
    for o in m.openings:
        if o.ports is None and o.protocol is Protocol.BOTH:
            everything.add(o.device_id)
            continue
        ports = o.ports if o.ports is not None else PortRange(1, 65535)
        per_proto = per_device.setdefault(o.device_id, {})
        for p in _L4[o.protocol]:
            per_proto.setdefault(p, []).append(ports)
    for dev_id in sorted(everything):
        open_all.extend(dev6[dev_id])
    for dev_id in sorted(per_device.keys() - everything):
        addrs = dev6[dev_id]
        for proto, ranges in sorted(per_device[dev_id].items()):
            for r in merge_ranges(ranges):
                if r.first == r.last:
                    open_ports.extend(f"{a} . {proto} . {r.first}" for a in addrs)
                else:
                    open_ranges.extend(f"{a} . {proto} . {r.first}-{r.last}" for a in addrs)


def chains(host: Host, policy: Policy) -> tuple[Chain, ...]:
    """The fixed rule skeleton; depends on the host's interfaces and the policy flags only."""
    up = _ifset(host.uplink_interfaces)
    mem = _ifset(host.member_interfaces)
    to_members = [
        "ct status dnat accept",
        "ip6 daddr @open6_all accept",
        "ip6 daddr . meta l4proto . th dport @open6_ports accept",
        "ip6 daddr . meta l4proto . th dport @open6_ranges accept",
    ]
    if policy.inbound_icmpv6_echo:
        to_members.append("icmpv6 type echo-request accept")
    to_members.append("drop")
    return (
        Chain(
            "dstnat",
            (
                f"iifname {up} dnat ip addr . port to ip daddr . meta l4proto . th dport map @fwd_ports",
                f"iifname {up} dnat ip to ip daddr . meta l4proto . th dport map @fwd_ranges",
            ),
            "nat",
            "prerouting",
            "dstnat",
            "accept",
        ),
        Chain(
            "forward",
            (
                "ct state established,related accept",
                "ct state invalid drop",
                "ip saddr @mgmt4 accept",
                "ip daddr @mgmt4 accept",
                "ip6 saddr @mgmt6 accept",
                "ip6 daddr @mgmt6 accept",
                f"iifname {mem} jump from_members",
                f"oifname {mem} jump to_members",
            ),
            "filter",
            "forward",
            "filter",
            "accept",
        ),
        Chain(
            "from_members",
            (
                "ip saddr != @src_nat drop",
                "ip6 saddr != @src6 drop",
                "meta l4proto . th dport @blocked_out drop",
                "accept",
            ),
        ),
        Chain(
            "prerouting",
            (f"iifname {up} ct state new meta l4proto . th dport @blocked_in drop",),
            "filter",
            "prerouting",
            "mangle",
            "accept",
        ),
        Chain(
            "shape",
            (
                f"oifname {mem} meta priority set ip daddr map @shape4",
                f"oifname {mem} meta priority set ip6 daddr map @shape6",
                f"oifname {up} meta priority set ip saddr map @shape4",
                f"oifname {up} meta priority set ip6 saddr map @shape6",
            ),
            "filter",
            "postrouting",
            "mangle",
            "accept",
        ),
        Chain(
            "srcnat",
            (f"oifname {up} snat ip to ip saddr map @src_nat",),
            "nat",
            "postrouting",
            "srcnat",
            "accept",
        ),
        Chain("to_members", tuple(to_members)),
    )


def shapers(snapshot: Snapshot) -> tuple[Shaper, ...]:
    """HTB trees: download on member-side interfaces, upload on uplinks; one class per member."""
    host = snapshot.host
    shaped = [m for m in snapshot.members if m.shaping is not None]
    minors = class_minors(m.id for m in shaped)
    down = []
    upc = []
    for m in shaped:
        assert m.shaping is not None  # noqa: S101  (narrowing for the type checker)
        major = class_major(host, m.id)
        minor = minors[m.id]
        down.append(HtbClass(major, minor, m.shaping.down_kbit, m.shaping.down_kbit))
        upc.append(HtbClass(major, minor, m.shaping.up_kbit, m.shaping.up_kbit))
    down.sort()
    upc.sort()
    out = [
        Shaper(dev, host.shaping_root, host.tx_queues, host.link_kbit, tuple(down))
        for dev in host.member_interfaces
    ]
    out += [
        Shaper(dev, host.shaping_root, host.tx_queues, host.link_kbit, tuple(upc))
        for dev in host.uplink_interfaces
    ]
    return tuple(sorted(out, key=lambda s: s.dev))


def build(snapshot: Snapshot) -> Ruleset:
    """Compile a snapshot into the IR of one host."""
    sets = [SetDef(VERSION_SET, "mark")]
    sets += policy_sets(snapshot.policy)
    sets += member_sets(snapshot)
    sets.sort(key=lambda s: s.name)
    table = Table(TABLE_FAMILY, TABLE_NAME, tuple(sets), chains(snapshot.host, snapshot.policy))
    return Ruleset(snapshot.host.name, (table,), shapers(snapshot))
