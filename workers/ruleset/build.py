"""Snapshot -> IR: one small function per concern, all output in canonical order.

The structure (tables, chains, rules, set definitions, shaper roots) depends only on the host and
on the size class of each hash set (see `capacity`), never on member data itself, so a change of
members, devices, forwards, openings or shaping is an element change that `diff` can apply
incrementally. Per-packet work is a fixed handful of rules and set/map lookups, whatever the
number of members:

    forward:   ct established,related accept -> ct invalid drop -> management accept ->
               from members: anti-spoofing, no Internet without public IPv4, blocked ports ->
               to members: DNATed, or IPv6 opening (address . proto . port / range / all)
    prerouting (mangle): new inbound to a blocked port dropped before DNAT
    dstnat:    IPv6 and anything not from the uplink leave after one comparison each; then
               dnat via maps keyed ip daddr . th dport, one per protocol (fwd_tcp, fwd_udp, and
               fwd_both behind `meta l4proto { tcp, udp }`: one element for a "both" forward);
               equal port ranges in the interval map fwd_ranges (address . proto . range);
               shifted ranges expanded to single ports (nft has no offset NAT)
    srcnat:    snat via map src_nat: device IPv4 -> member's public IPv4
    shaping:   one `oifname vmap` to shape_down / shape_up, there meta priority set ip daddr/saddr
               map @shape4, ip6 ... & ffff:ffff:ffff:ffff:: map @shape6_net (a member's own /64)
               or map @shape6 (addresses in a shared /64)
    account:   one `iifname . oifname vmap` to account_in / account_out: what crosses the uplink
               bumps the counter of its element in acct4_in/out (device IPv4), acct6n_in/out
               (member /64, masked) or acct6_in/out (shared /64's address)

Per-packet cost: an interface name (`iifname`/`oifname`) is copied into a register in every
rule that reads it; the hooks every packet meets read it once (a vmap or a guard rule) or only
after a cheaper test (the DNS port before the interface; `ct state new` before it).

Anti-spoofing and SNAT are separate concerns: every device IPv4 is in exactly one of src_nat
(member has a public IPv4) and nopub4 (member has none), and the anti-spoofing rule accepts a
source found in either, so a member without public IPv4 is not a spoofer; its IPv4 towards the
uplink is dropped by its own rule ("member without public IPv4: no Internet via NAT"), IPv6
works. (One element per device instead of a separate 60,000-element anti-spoofing set.)
IPv6 anti-spoofing and shaping use one element per /64 owned by a single member (masked lookup)
and per-address elements only in a /64 that devices of several members share (a double room),
so no member can send from another member's addresses.
"""

from __future__ import annotations

import ipaddress
import operator
import socket
from collections.abc import Iterable

from workers.ruleset.ir import Chain, Flowtable, HtbClass, Ruleset, SetDef, Shaper, Table
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
    gc_paused,
)

TABLE_FAMILY = "inet"
TABLE_NAME = "portal_fw"  # the firewall helper accepts only tables named portal_*

HTB_ROOT_MAJOR = 0x1
MQ_QUEUE_MAJOR_BASE = 0x100  # the HTB under mq queue q gets handle (0x100 + q):
DEFAULT_MINOR = 0x2  # unshaped traffic
FIRST_MEMBER_MINOR = 0x10
MINOR_SPACE = 0xFFF0 - FIRST_MEMBER_MINOR  # member minors 0x10..0xffef

_AF6 = socket.AF_INET6
_ntoa = socket.inet_ntoa
_ntop = socket.inet_ntop
NET64_MASK = "ffff:ffff:ffff:ffff::"  # nft spelling of the /64 mask in the masked lookups


def fmt4(address: ipaddress.IPv4Address) -> str:
    """Dotted quad. `_ip` is ipaddress's integer value (no Python-level call); a test guards it."""
    return _ntoa(address._ip.to_bytes(4, "big"))  # type: ignore[attr-defined]


def fmt6(address: ipaddress.IPv6Address) -> str:
    """RFC 5952 text (inet_ntop: C speed, 7x faster than str())."""
    return _ntop(_AF6, address._ip.to_bytes(16, "big"))  # type: ignore[attr-defined]


def _net64(prefix: int) -> str:
    """The network address of the /64 with upper 64 bits `prefix`, e.g. ``2001:db8:100:1::``."""
    return _ntop(_AF6, (prefix << 64).to_bytes(16, "big"))


def capacity(count: int) -> int:
    """`size` of a hash set holding `count` elements: a power of two, >= 1.25 x count, >= 1024.

    A declared size makes the kernel use its fixed-size hash (no rehashing while loading: about
    25% faster) and bounds the set. The size is part of the structure: an increment that would
    need a larger set is a structure change, so `diff` falls back to the full replacement.
    """
    return 1 << max(10, (count + count // 4).bit_length())


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
    mgmt4 = tuple(str(n) for n in ipaddress.collapse_addresses(nets4))
    mgmt6 = tuple(str(n) for n in ipaddress.collapse_addresses(nets6))
    port_key = "inet_proto . inet_service"
    interval = ("interval",)
    reg4 = ipaddress.collapse_addresses(policy.registration_networks)
    return [
        SetDef("blocked_in", port_key, None, interval, _port_rule_elements(policy.blocked_inbound)),
        SetDef(
            "blocked_out", port_key, None, interval, _port_rule_elements(policy.blocked_outbound)
        ),
        SetDef("mgmt4", "ipv4_addr", None, interval, mgmt4),
        SetDef("mgmt6", "ipv6_addr", None, interval, mgmt6),
        SetDef("reg4", "ipv4_addr", None, interval, tuple(str(n) for n in reg4)),
        SetDef(
            "walled4", "ipv4_addr", None, interval, tuple(fmt4(a) for a in policy.portal_addresses)
        ),
        SetDef("dns4", "ipv4_addr", None, interval, tuple(fmt4(a) for a in policy.dns_servers)),
        *quota_sets(policy),
    ]


QUOTA_KEYS = {"4": "ipv4_addr", "6": "ipv6_addr"}
QUOTA_SIZE = 1 << 17  # members (public IPv4s, /64s) tracked at once per direction
QUOTA_HIT_TIMEOUT = "1h"


def quota_sets(policy: Policy) -> list[SetDef]:
    """Dynamic sets of the conntrack quotas (filled by the data path, never by the portal):
    ct_out/ct_in count each member's connections; quota_hit remembers, with a counter, which
    member hit a quota in the last hour (health reads it: staff see who)."""
    out: list[SetDef] = []
    for family, key in QUOTA_KEYS.items():
        if policy.conntrack_quota_out:
            out.append(SetDef(f"ct_out{family}", key, None, ("dynamic",), (), QUOTA_SIZE))
        if policy.conntrack_quota_in:
            out.append(SetDef(f"ct_in{family}", key, None, ("dynamic",), (), QUOTA_SIZE))
        if policy.conntrack_quota_out or policy.conntrack_quota_in:
            out.append(
                SetDef(
                    f"quota_hit{family}",
                    key,
                    None,
                    ("dynamic", "timeout"),
                    (),
                    QUOTA_SIZE,
                    (f"timeout {QUOTA_HIT_TIMEOUT}", "counter"),
                )
            )
    return out


def quota_rules(policy: Policy) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(outbound IPv4 after SNAT, outbound IPv6 in from_members, inbound in to_members): a new
    connection over its member's quota is dropped before conntrack confirms it (no entry)."""
    q_out, q_in = policy.conntrack_quota_out, policy.conntrack_quota_in
    out4: tuple[str, ...] = ()
    out6: tuple[str, ...] = ()
    inbound: tuple[str, ...] = ()
    net6 = f"ip6 saddr & {NET64_MASK}"
    dst6 = f"ip6 daddr & {NET64_MASK}"
    if q_out:
        out4 = (
            f"ct state new ct status snat add @ct_out4 {{ ct reply ip daddr ct count over {q_out} }}"
            ' update @quota_hit4 { ct reply ip daddr } counter drop comment "quota: connections of the devices"',
        )
        out6 = (
            f"ct state new meta nfproto ipv6 add @ct_out6 {{ {net6} ct count over {q_out} }}"
            f' update @quota_hit6 {{ {net6} }} counter drop comment "quota: connections of the devices"',
        )
    if q_in:
        inbound = (
            f"ct state new ct status dnat add @ct_in4 {{ ct original ip daddr ct count over {q_in} }}"
            ' update @quota_hit4 { ct original ip daddr } counter drop comment "quota: forwarded connections"',
            f"ct state new meta nfproto ipv6 add @ct_in6 {{ {dst6} ct count over {q_in} }}"
            f' update @quota_hit6 {{ {dst6} }} counter drop comment "quota: forwarded connections"',
        )
    return out4, out6, inbound


def _hash_set(name: str, key: str, value: str | None, elements: list[str]) -> SetDef:
    return SetDef(name, key, value, (), tuple(elements), capacity(len(elements)))


def _shared_prefixes(snapshot: Snapshot) -> set[int]:
    """Upper 64 bits of the /64s holding device addresses of more than one member."""
    owner: dict[int, int] = {}
    claim = owner.setdefault
    shared: set[int] = set()
    for m in snapshot.members:
        mid = m.id
        for d in m.devices:
            for a in d.ipv6:
                p = a._ip >> 64  # type: ignore[attr-defined]
                if claim(p, mid) != mid:
                    shared.add(p)
    return shared


# The per-member elements of member_sets, indexed into the list of sets below.
(
    FWD_TCP, FWD_UDP, FWD_BOTH, FWD_RANGES, SRC_NAT, NOPUB4, SRC6, SRC6_NET, OPEN_ALL,
    OPEN_PORTS, OPEN_RANGES, SHAPE4, SHAPE6, SHAPE6_NET, ACCT4, SYN4,
) = range(16)  # fmt: skip
_Parts = tuple[tuple[int, tuple[str, ...]], ...]  # (set index, elements) for non-empty sets

# Per host (and SYN proxy on or off): member id -> (member, classid, shared flags of its /64s, its /64s, parts). A worker
# compiles again and again while few members change; the snapshot reader hands over the same
# Member objects for unchanged members, so their elements are reused as they are (identity
# check, plus the two things outside the member that shape them: its HTB class and whether
# each of its /64s is shared with another member). Bounded: only the last compile's members.
_ELEMENT_CACHE: dict[
    tuple[str, bool], dict[int, tuple[Member, str, tuple[bool, ...], tuple[int, ...], _Parts]]
] = {}
_ELEMENT_CACHE_HOSTS = 64
# The last member_sets answer: (the members tuple it was built from, (mq, queues, syn proxy),
# the sets, the per-member cache entries). Reused when the next compile hands over the same
# tuple (the other host of a pair, from the same read: SnapshotData.for_buildings).
_Entries = dict[int, tuple[Member, str, tuple[bool, ...], tuple[int, ...], _Parts]]
_LAST_MEMBER_SETS: (
    tuple[tuple[Member, ...], tuple[bool, int, bool, bool], tuple[SetDef, ...], _Entries] | None
) = None


def _element_cache_store(key: tuple[str, bool], fresh: _Entries) -> None:
    if len(_ELEMENT_CACHE) >= _ELEMENT_CACHE_HOSTS and key not in _ELEMENT_CACHE:
        _ELEMENT_CACHE.pop(next(iter(_ELEMENT_CACHE)))
    _ELEMENT_CACHE[key] = fresh


def _own_prefixes(m: Member) -> tuple[int, ...]:
    """The /64s (upper 64 bits) of a member's device addresses, in first-seen order."""
    return tuple(dict.fromkeys(a._ip >> 64 for d in m.devices for a in d.ipv6))  # type: ignore[attr-defined]


def _member_elements(m: Member, classid: str, shared: set[int], syn: bool = True) -> _Parts:
    """One member's elements of every per-member set (see `member_sets`); the SYN proxy's
    `syn_fwd4` elements only with `syn` (the set exists only then).

    Every set has its own local list (no list of 16 lists per member): a cold compile runs
    this once per member, so each avoided allocation and index counts."""
    ntoa, ntop, af6 = _ntoa, _ntop, _AF6
    pub = m.public_ipv4
    pub_s = ntoa(pub._ip.to_bytes(4, "big")) if pub is not None else ""  # type: ignore[attr-defined]
    src_nat: list[str] = []
    acct4: list[str] = []
    nopub4: list[str] = []
    shape4: list[str] = []
    src6: list[str] = []
    shape6: list[str] = []
    src6_net: list[str] = []
    shape6_net: list[str] = []
    dev4: dict[int, str] = {}
    last = -1  # the member's last own /64 (devices of a member share one, usually)
    seen: set[int] = set()  # all its own /64s
    for d in m.devices:
        a4 = d.ipv4
        if a4 is not None:
            s4 = dev4[d.id] = ntoa(a4._ip.to_bytes(4, "big"))  # type: ignore[attr-defined]
            if pub is not None:
                src_nat.append(f"{s4} : {pub_s}")
                acct4.append(s4)
            else:
                nopub4.append(s4)
            if classid:
                shape4.append(f"{s4} : {classid}")
        for a in d.ipv6:
            n = a._ip  # type: ignore[attr-defined]
            p = n >> 64
            if p == last:
                continue
            if p in shared:
                s6 = ntop(af6, n.to_bytes(16, "big"))
                src6.append(s6)
                if classid:
                    shape6.append(f"{s6} : {classid}")
            elif p not in seen:
                seen.add(p)
                last = p
                s6 = ntop(af6, (p << 64).to_bytes(16, "big"))
                src6_net.append(s6)
                if classid:
                    shape6_net.append(f"{s6} : {classid}")
    parts = _nonempty(
        (SRC_NAT, src_nat), (NOPUB4, nopub4), (SRC6, src6), (SRC6_NET, src6_net),
        (SHAPE4, shape4), (SHAPE6, shape6), (SHAPE6_NET, shape6_net), (ACCT4, acct4),
    )  # fmt: skip
    if m.forwards:
        parts += _forward_elements(m, pub_s, dev4, syn)
    if m.openings:
        parts += _opening_elements(m)
    return tuple(parts)


def _nonempty(*pairs: tuple[int, list[str]]) -> list[tuple[int, tuple[str, ...]]]:
    """(set index, elements) of the sets that got elements."""
    return [(index, tuple(elements)) for index, elements in pairs if elements]


def _forward_elements(
    m: Member, pub_s: str, dev4: dict[int, str], syn: bool
) -> list[tuple[int, tuple[str, ...]]]:
    """A member's DNAT elements (fwd_tcp, fwd_udp, fwd_both, fwd_ranges) and, with `syn`,
    the public side of its TCP forwards (syn_fwd4), as (set index, elements) pairs."""
    tcp, udp, l4 = Protocol.TCP, Protocol.UDP, _L4
    fwd_tcp: list[str] = []
    fwd_udp: list[str] = []
    fwd_both: list[str] = []
    ranges: list[str] = []
    syn4: list[str] = []
    for f in m.forwards:
        if not f.enabled:
            continue
        pp = f.public_ports
        first, plast = pp.first, pp.last
        proto = f.protocol
        single = fwd_tcp if proto is tcp else fwd_udp if proto is udp else fwd_both
        if syn and proto is not udp:  # the public side of a TCP forward (the SYN proxy's set)
            syn4.append(f"{pub_s} . {first}" if first == plast else f"{pub_s} . {first}-{plast}")
        tp = f.target_ports
        if first == plast:
            single.append(f"{pub_s} . {first} : {dev4[f.device_id]} . {tp.first}")
        elif first == tp.first:
            target = dev4[f.device_id]
            ranges += [f"{pub_s} . {p} . {first}-{plast} : {target}" for p in l4[proto]]
        else:  # nft has no offset NAT: a shifted range becomes single ports
            target = dev4[f.device_id]
            shift = tp.first - first
            single.extend(
                f"{pub_s} . {port} : {target} . {port + shift}" for port in range(first, plast + 1)
            )
    return _nonempty(
        (FWD_TCP, fwd_tcp), (FWD_UDP, fwd_udp), (FWD_BOTH, fwd_both), (FWD_RANGES, ranges),
        (SYN4, syn4),
    )  # fmt: skip


def _opening_elements(m: Member) -> list[tuple[int, tuple[str, ...]]]:
    """A member's IPv6 opening elements (open6_all, open6_ports, open6_ranges) as (set index,
    elements) pairs."""
    open_all: list[str] = []
    open_ports: list[str] = []
    open_ranges: list[str] = []
    openings = m.openings
    o = openings[0]
    r = o.ports
    if len(openings) > 1 or r is None or r.first != r.last:
        _openings(m, open_all, open_ports, open_ranges)
    else:
        dev_id = o.device_id  # the common case: one opening of a single port
        for d in m.devices:
            if d.id == dev_id:
                port = r.first
                for p in _L4[o.protocol]:
                    for a in d.ipv6:
                        open_ports.append(
                            f"{_ntop(_AF6, a._ip.to_bytes(16, 'big'))} . {p} . {port}"  # type: ignore[attr-defined]
                        )
    return _nonempty((OPEN_ALL, open_all), (OPEN_PORTS, open_ports), (OPEN_RANGES, open_ranges))


def member_sets(snapshot: Snapshot) -> list[SetDef]:
    """All per-member elements in one pass over the members (the hot loop of the compiler).

    One element per forward and protocol family ("both" is one element of `fwd_both`), one per
    device IPv4 (in `src_nat`, or in `nopub4` for a member without public IPv4), one per
    member /64 for IPv6 anti-spoofing and shaping (per device address only in a /64 that
    devices of several members share), one per device address and opening. Each member's
    elements come from `_member_elements`, reused from the host's last compile when the member
    and what shapes its elements are unchanged; the sets list them in member order.
    """
    global _LAST_MEMBER_SETS
    host = snapshot.host
    mq = host.shaping_root is ShapingRoot.MQ
    queues = host.tx_queues
    syn = snapshot.policy.syn_proxy
    key = (host.name, syn)  # the syn_fwd4 elements are there or not
    # The second host of a pair compiles the same members right after the first: the sets
    # depend on nothing else of the host than its HTB layout, so they are the first's.
    pair_key = (mq, queues if mq else 0, syn, host.fast_path)
    last = _LAST_MEMBER_SETS
    if last is not None and last[0] is snapshot.members and last[1] == pair_key:
        _element_cache_store(key, last[3])
        return list(last[2])
    minors = class_minors(m.id for m in snapshot.members if m.shaping is not None)
    shared = _shared_prefixes(snapshot)
    cache = _ELEMENT_CACHE.get(key, {})
    fresh: dict[int, tuple[Member, str, tuple[bool, ...], tuple[int, ...], _Parts]] = {}
    out: list[list[str]] = [[] for _ in range(16)]
    extend = [lst.extend for lst in out]
    elements_of = _member_elements
    with gc_paused():
        for m in snapshot.members:
            mid = m.id
            classid = ""
            if m.shaping is not None:
                major = MQ_QUEUE_MAJOR_BASE + mid % queues if mq else HTB_ROOT_MAJOR
                classid = f"{major:x}:{minors[mid]:x}"
            hit = cache.get(mid)
            if (
                hit is not None
                and hit[0] is m
                and hit[1] == classid
                and (hit[2] == tuple(p in shared for p in hit[3]) if shared else not any(hit[2]))
            ):
                entry = hit
            else:
                prefixes = _own_prefixes(m)
                flags = tuple(p in shared for p in prefixes) if shared else (False,) * len(prefixes)
                entry = (m, classid, flags, prefixes, elements_of(m, classid, shared, syn))
            fresh[mid] = entry
            for index, elements in entry[4]:
                extend[index](elements)
    _element_cache_store(key, fresh)
    v4_port = "ipv4_addr . inet_service"
    v4_proto_port = "ipv4_addr . inet_proto . inet_service"
    v6_port = "ipv6_addr . inet_proto . inet_service"
    syn_set = (
        [SetDef("syn_fwd4", "ipv4_addr . inet_service", None, ("interval",), tuple(out[SYN4]))]
        if syn
        else []
    )
    result = [
        *syn_set,
        *accounting_sets(out[ACCT4], out[SRC6_NET], out[SRC6]),
        _hash_set("fwd_both", v4_port, v4_port, out[FWD_BOTH]),
        SetDef("fwd_ranges", v4_proto_port, "ipv4_addr", ("interval",), tuple(out[FWD_RANGES])),
        _hash_set("fwd_tcp", v4_port, v4_port, out[FWD_TCP]),
        _hash_set("fwd_udp", v4_port, v4_port, out[FWD_UDP]),
        _hash_set("nopub4", "ipv4_addr", None, out[NOPUB4]),
        _hash_set("open6_all", "ipv6_addr", None, out[OPEN_ALL]),
        _hash_set("open6_ports", v6_port, None, out[OPEN_PORTS]),
        SetDef(
            "open6_ranges",
            v6_port,
            None,
            ("interval",),
            tuple(out[OPEN_RANGES]) + (LIVE_SENTINEL6 if host.fast_path else ()),
        ),
        _hash_set("shape4", "ipv4_addr", "classid", out[SHAPE4]),
        _hash_set("shape6", "ipv6_addr", "classid", out[SHAPE6]),
        _hash_set("shape6_net", "ipv6_addr", "classid", out[SHAPE6_NET]),
        _hash_set("src6", "ipv6_addr", None, out[SRC6]),
        _hash_set("src6_net", "ipv6_addr", None, out[SRC6_NET]),
        _hash_set("src_nat", "ipv4_addr", "ipv4_addr", out[SRC_NAT]),
        _hash_set("dev4_pub", "ipv4_addr", None, _keys(out[SRC_NAT])),
        *(fast_path_sets(out) if host.fast_path else ()),
    ]
    _LAST_MEMBER_SETS = (snapshot.members, pair_key, tuple(result), fresh)
    return result


def _keys(elements: list[str]) -> list[str]:
    """The keys of map elements ("key : value")."""
    return [e.split(" : ", 1)[0] for e in elements]


# The "live" element of the interval sets the fast path's kept-checks look keys up in. A new
# concatenated interval set (pipapo) gets its elements at the very end of the commit, after
# the new generation (and its rules) took over: for that moment a lookup in it misses every
# key, which made forward_kept reset flows through forwards that stay (the kernel lab caught
# it: the open xfail of issue 29). The kept-checks judge a flow only once the set holds this
# element (a masked key, all zeros, that no packet has).
LIVE_SENTINEL4 = "0.0.0.0 . 0"
LIVE_SENTINEL6 = (":: . tcp . 0", ":: . udp . 0")


def fast_path_sets(out: list[list[str]]) -> list[SetDef]:
    """Plain sets with the keys of maps the fast path's rules look up (a kernel before 6.4 or
    so refuses a lookup in a map without using its value: Debian 12's 6.1 answers "Invalid
    argument"): the shaped addresses, and the public side of every forward per protocol."""
    tcp: list[str] = _keys(out[FWD_TCP]) + _keys(out[FWD_BOTH])
    udp: list[str] = _keys(out[FWD_UDP]) + _keys(out[FWD_BOTH])
    for key in _keys(out[FWD_RANGES]):  # "address . proto . first-last"
        address, proto, ports = key.split(" . ")
        (tcp if proto == "tcp" else udp).append(f"{address} . {ports}")
    interval = ("interval",)
    port_key = "ipv4_addr . inet_service"
    return [
        SetDef("fwd_keys_tcp", port_key, None, interval, (*tcp, LIVE_SENTINEL4)),
        SetDef("fwd_keys_udp", port_key, None, interval, (*udp, LIVE_SENTINEL4)),
        _hash_set("shaped4", "ipv4_addr", None, _keys(out[SHAPE4])),
        _hash_set("shaped6", "ipv6_addr", None, _keys(out[SHAPE6])),
        _hash_set("shaped6_net", "ipv6_addr", None, _keys(out[SHAPE6_NET])),
    ]


def accounting_sets(dev4: list[str], net6: list[str], addr6: list[str]) -> list[SetDef]:
    """Traffic per member: sets whose elements carry counters, bumped by every packet that
    crosses the uplink (chain `account`). IPv4 per device with a public address (the others
    cannot reach the uplink), IPv6 per member /64 (per address in a shared /64): the same keys
    as anti-spoofing. One set per direction, since an element has one counter."""
    out = []
    for name, elements in (("acct4", dev4), ("acct6n", net6), ("acct6", addr6)):
        for direction in ("in", "out"):
            out.append(
                SetDef(
                    f"{name}_{direction}", "ipv6_addr" if "6" in name else "ipv4_addr", None,
                    (), tuple(elements), capacity(len(elements)), ("counter",),
                )
            )  # fmt: skip
    return out


def _spell6(addresses: tuple[ipaddress.IPv6Address, ...]) -> list[str]:
    return [_ntop(_AF6, a._ip.to_bytes(16, "big")) for a in addresses]  # type: ignore[attr-defined]


def _openings(
    m: Member,
    open_all: list[str],
    open_ports: list[str],
    open_ranges: list[str],
) -> None:
    """IPv6 openings of one member: all-ports devices, merged ranges, single ports."""
    if len(m.openings) == 1:  # the common case: nothing to merge
        o = m.openings[0]
        dev_id = o.device_id
        addrs = _spell6(next(d for d in m.devices if d.id == dev_id).ipv6)
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

    by_id = {d.id: d for d in m.devices}

    def spelled(dev_id: int) -> list[str]:
        return _spell6(by_id[dev_id].ipv6)

    for dev_id in sorted(everything):
        open_all.extend(spelled(dev_id))
    for dev_id in sorted(per_device.keys() - everything):
        addrs = spelled(dev_id)
        for proto, ranges in sorted(per_device[dev_id].items()):
            for r in merge_ranges(ranges):
                if r.first == r.last:
                    open_ports.extend(f"{a} . {proto} . {r.first}" for a in addrs)
                else:
                    open_ranges.extend(f"{a} . {proto} . {r.first}-{r.last}" for a in addrs)


FLOWTABLE_NAME = "fastpath"
# The ingress hook of the member and uplink interfaces, where the kernel's flowtable hook
# forwards an offloaded packet (no inet ingress chain of ours runs there).
FLOWTABLE_PRIORITY = "filter"


def flowtables(host: Host) -> tuple[Flowtable, ...]:
    """The fast path's flowtable on the member and uplink interfaces (none unless enabled)."""
    if not host.fast_path:
        return ()
    devices = tuple(sorted({*host.member_interfaces, *host.uplink_interfaces}))
    return (Flowtable(FLOWTABLE_NAME, FLOWTABLE_PRIORITY, devices),)


def fast_path_rules(host: Host) -> tuple[tuple[str, ...], tuple[Chain, ...]]:
    """(the forward chain's rules, the chains `forward_kept`, `opening_kept` and `fast_path`)
    with the fast path.

    An established TCP/UDP flow is offered to the flowtable unless a shaped member is one of
    its ends: offloaded packets skip the forward and postrouting hooks, so `meta priority set`
    in `shape` would never classify them into the member's HTB class (they would land in the
    default class, unshaped). In forward the member side is the device address both ways
    (outbound: source before SNAT; inbound: destination after DNAT or the reverse SNAT), so
    the shaping maps' keys decide. The counter counts the packets that offered their flow
    (one per flow, and again only when a flow comes back from the flowtable)."""
    if not host.fast_path:
        return (), ()
    net6 = NET64_MASK
    orig6 = "ct state established meta nfproto ipv6 meta l4proto { tcp, udp } ct original ip6 daddr"
    offer = (
        "ct state established ct status dnat jump forward_kept",
        # IPv6: a flow started towards a member's device came in through an opening (or from
        # a management source): the same check as forward_kept, against the openings.
        f"{orig6} & {net6} @src6_net jump opening_kept",
        f"{orig6} @src6 jump opening_kept",
        "ct state established meta l4proto { tcp, udp } jump fast_path",
    )
    orig = "ct original ip daddr"
    kept = Chain(
        "forward_kept",
        (
            # An established flow to a forward that is gone (or disabled) ends: it came back
            # from the flowtable when the table was replaced (see diff), and meets this first.
            # The original destination (public address and port) is a forward's public side.
            *(
                f"meta l4proto {proto} {orig} & 0.0.0.0 . ct original proto-dst & 0"
                f" != @fwd_keys_{proto} return"  # the set is not live yet (LIVE_SENTINEL4)
                for proto in ("tcp", "udp")
            ),
            f"meta l4proto tcp {orig} . ct original proto-dst @fwd_keys_tcp return",
            f"meta l4proto udp {orig} . ct original proto-dst @fwd_keys_udp return",
            'meta l4proto tcp counter reject with tcp reset comment "forward removed: its connection ends"',
            'counter drop comment "forward removed: its flow ends"',
        ),
    )
    key6 = "ct original ip6 daddr . meta l4proto . ct original proto-dst"
    opening_kept = Chain(
        "opening_kept",
        (
            # An established IPv6 flow to a device whose opening is gone ends, like a removed
            # forward's (it came back from the flowtable when the table was replaced).
            "ct original ip6 saddr @mgmt6 return",
            *(
                f"meta l4proto {proto} ct original ip6 daddr & :: . meta l4proto"
                f" . ct original proto-dst & 0 != @open6_ranges return"  # LIVE_SENTINEL6
                for proto in ("tcp", "udp")
            ),
            *(
                f"meta l4proto {proto} {key6} @{name} return"  # proto-dst's type: per protocol
                for name in ("open6_ports", "open6_ranges")
                for proto in ("tcp", "udp")
            ),
            "ct original ip6 daddr @open6_all return",
            'meta l4proto tcp counter reject with tcp reset comment "opening removed: its connection ends"',
            'counter drop comment "opening removed: its flow ends"',
        ),
    )
    chain = Chain(
        "fast_path",
        (
            "ip saddr @shaped4 return",
            "ip daddr @shaped4 return",
            f"ip6 saddr & {net6} @shaped6_net return",
            f"ip6 daddr & {net6} @shaped6_net return",
            "ip6 saddr @shaped6 return",
            "ip6 daddr @shaped6 return",
            f'counter flow add @{FLOWTABLE_NAME} comment "fast path: flow offered to the flowtable"',
        ),
    )
    return offer, (kept, opening_kept, chain)


def chains(host: Host, policy: Policy) -> tuple[Chain, ...]:
    """The fixed rule skeleton; depends on the host's interfaces and the policy flags only."""
    up = _ifset(host.uplink_interfaces)
    mem = _ifset(host.member_interfaces)
    quota_out4, quota_out6, quota_in = quota_rules(policy)
    # Sources that can never arrive from the uplink: dropped before conntrack (a spoofed SYN
    # to a forward would otherwise be answered towards the management or member side).
    spoofed = []
    if host.management_interfaces:
        spoofed += [
            f'iifname {up} ip saddr @mgmt4 counter drop comment "spoofed: management source from the uplink"',
            f'iifname {up} ip6 saddr @mgmt6 counter drop comment "spoofed: management source from the uplink"',
        ]
    if host.private_networks:
        nets = ", ".join(str(n) for n in ipaddress.collapse_addresses(host.private_networks))
        spoofed.append(
            f'iifname {up} ip saddr {{ {nets} }} counter drop comment "spoofed: member source from the uplink"'
        )
    syn_untracked: tuple[str, ...] = ()
    syn_proxy: tuple[str, ...] = ()
    syn_out: tuple[Chain, ...] = ()
    if policy.syn_proxy:
        # A SYN to a forwarded TCP port is not tracked (matched on the public address and port:
        # before DNAT); the forward chain answers it with a SYN cookie, and the client's ACK
        # (invalid without an entry) makes the proxy open the connection to the device. That
        # SYN leaves the host itself, so DNAT must also run in the output hook.
        syn_untracked = (
            f"iifname {up} tcp flags & (fin | syn | rst | ack) == syn"
            " ip daddr . tcp dport @syn_fwd4 notrack",
        )
        syn_proxy = (
            f"iifname {up} ct state invalid,untracked ip daddr . tcp dport @syn_fwd4 counter"
            ' synproxy mss 1460 wscale 7 timestamp sack-perm comment "SYN proxy: forwarded TCP ports"',
        )
        syn_out = (
            Chain(
                "dstnat_local",
                (
                    "meta l4proto tcp dnat ip addr . port to ip daddr . th dport map @fwd_tcp",
                    "meta l4proto tcp dnat ip addr . port to ip daddr . th dport map @fwd_both",
                    "meta l4proto tcp dnat ip to ip daddr . meta l4proto . th dport map @fwd_ranges",
                ),
                "nat",
                "output",
                "-100",
                "accept",
            ),
        )
    # The management networks' sources: from their own link only when the host has one (a
    # management source arriving from pl-inet or pl-dorm is then a spoof); otherwise from either
    # side, checked only where a packet would be dropped (no lookup on a member's own flows).
    management = ("ip saddr @mgmt4 accept", "ip6 saddr @mgmt6 accept")
    mgmt_on_sides = () if host.management_interfaces else management
    to_members = [
        *quota_in,
        "ct status dnat accept",
        # Most openings name ports: their lookup first, "all ports" last.
        "ip6 daddr . meta l4proto . th dport @open6_ports accept",
        "ip6 daddr . meta l4proto . th dport @open6_ranges accept",
        "ip6 daddr @open6_all accept",
        *mgmt_on_sides,
    ]
    if policy.inbound_icmpv6_echo:
        to_members.append("icmpv6 type echo-request accept")
    to_members.append("drop")
    dnat = "dnat ip addr . port to ip daddr . th dport map"
    # One lookup sends a new flow to its path (interface pair -> chain); pairs not named here
    # meet the drop policy. Member side -> uplink and back; the rest only for management sources.
    sides = (*host.member_interfaces, *host.uplink_interfaces)
    paths = []
    for i in (*sides, *host.management_interfaces):
        for o in sides:
            if i in host.member_interfaces and o in host.uplink_interfaces:
                paths.append(f'"{i}" . "{o}" : jump from_members')
            elif i in host.uplink_interfaces and o in host.member_interfaces:
                paths.append(f'"{i}" . "{o}" : jump to_members')
            elif host.management_interfaces and i not in host.management_interfaces:
                continue  # between the sides, no management source is genuine
            else:
                paths.append(f'"{i}" . "{o}" : jump management')
    # The postrouting chains read the interface names once (a vmap), not in every rule.
    shape_paths = [f'"{o}" : jump shape_down' for o in host.member_interfaces]
    shape_paths += [f'"{o}" : jump shape_up' for o in host.uplink_interfaces]
    account_paths = [
        f'"{i}" . "{o}" : jump account_out'
        for i in host.member_interfaces
        for o in host.uplink_interfaces
    ]
    account_paths += [
        f'"{i}" . "{o}" : jump account_in'
        for i in host.uplink_interfaces
        for o in host.member_interfaces
    ]
    fast_path_offer, fast_path_chain = fast_path_rules(host)
    # Captive portal: a walled device's plain HTTP to anywhere goes to the portal's proxy, which
    # answers with a redirect to "This device is not registered" (the page names its MAC).
    captive_http: tuple[str, ...] = ()
    if policy.captive_proxy is not None:
        captive_http = (
            f"tcp dport 80 iifname {mem} ip saddr @reg4 ip daddr != @walled4"
            f" dnat ip to {policy.captive_proxy}",
        )
    if mgmt_on_sides:
        not_device = ("jump foreign4", "jump foreign6")
    else:
        not_device = (
            'counter drop comment "anti-spoofing: IPv4 source is no device address"',
            'counter drop comment "anti-spoofing: IPv6 source is no device address"',
        )
    return (
        Chain(
            "dstnat",
            (
                # Only IPv4 from the uplink has forwards: anything else leaves after one
                # comparison each (the interface name is read once, not in every rule).
                "meta nfproto ipv6 accept",
                *captive_http,
                f"iifname != {up} accept",
                f"meta l4proto tcp {dnat} @fwd_tcp",
                f"meta l4proto udp {dnat} @fwd_udp",
                f"meta l4proto {{ tcp, udp }} {dnat} @fwd_both",
                "dnat ip to ip daddr . meta l4proto . th dport map @fwd_ranges",
            ),
            "nat",
            "prerouting",
            "dstnat",
            "accept",
        ),
        Chain(
            "forward",
            (
                # Every path a host forwards is named here; anything else (the sync and the
                # management links above all) meets the drop policy, counted in the last rule.
                *fast_path_offer,
                "ct state established,related accept",
                *syn_proxy,
                "ct state invalid counter drop",
                "ct state untracked jump untracked",
                f"iifname . oifname vmap {{ {', '.join(paths)} }}",
                'counter comment "no allowed path: dropped by the policy"',
            ),
            "filter",
            "forward",
            "filter",
            "drop",
        ),
        Chain(
            "untracked",
            (
                # DNS with the network's resolvers, untracked by the early chain: both ways.
                f"iifname {mem} oifname {up} ip daddr @dns4"
                " meta l4proto { tcp, udp } th dport 53 accept",
                f"iifname {up} oifname {mem} ip saddr @dns4"
                " meta l4proto { tcp, udp } th sport 53 accept",
            ),
        ),
        Chain("management", management),
        *(
            (
                Chain(
                    "foreign4",
                    (
                        management[0],
                        'counter drop comment "anti-spoofing: IPv4 source is no device address"',
                    ),
                ),
                Chain(
                    "foreign6",
                    (
                        management[1],
                        'counter drop comment "anti-spoofing: IPv6 source is no device address"',
                    ),
                ),
            )
            if mgmt_on_sides
            else ()
        ),
        Chain(
            "from_members",
            (
                "ip saddr @reg4 jump walled",
                # dev4_pub (src_nat's keys: a plain set, since a 6.1 kernel refuses a lookup in
                # a map that ignores the value) and nopub4 hold every device IPv4 exactly once
                # (split by whether the member has a public IPv4): the anti-spoofing set.
                f"ip saddr != @dev4_pub ip saddr != @nopub4 {not_device[0]}",
                f"ip6 saddr & {NET64_MASK} != @src6_net ip6 saddr != @src6 {not_device[1]}",
                f"oifname {up} ip saddr @nopub4 counter drop"
                ' comment "member without public IPv4: no Internet via NAT"',
                'meta l4proto . th dport @blocked_out counter drop comment "blocked outbound port"',
                *quota_out6,
                "accept",
            ),
        ),
        Chain(
            "prerouting",
            (f"ct state new iifname {up} meta l4proto . th dport @blocked_in drop",),
            "filter",
            "prerouting",
            "mangle",
            "accept",
        ),
        Chain(
            "early",
            (
                "meta l4proto tcp jump early_tcp",
                *spoofed,
                *syn_untracked,
                # The network's own resolvers: DNS between them and the members bypasses
                # conntrack both ways (its entries would cost more than the answers).
                # The port before the lookup: every other packet passes with two comparisons.
                f"udp dport 53 iifname {mem} ip daddr @dns4 notrack",
                f"tcp dport 53 iifname {mem} ip daddr @dns4 notrack",
                f"udp sport 53 iifname {up} ip saddr @dns4 notrack",
                f"tcp sport 53 iifname {up} ip saddr @dns4 notrack",
            ),
            "filter",
            "prerouting",
            "raw",
            "accept",
        ),
        Chain(
            "early_tcp",
            (
                # Before conntrack sees them (raw priority): TCP packets no real stack sends.
                # Each reason has its own counter (staff see which flood it was). A segment
                # with ACK and none of SYN, FIN, RST (nearly all of them) is none of these.
                "tcp flags & (fin | syn | rst | ack) == ack return",
                'tcp flags & (syn | ack) == syn tcp window 0 counter drop comment "malformed: SYN with window 0"',
                'tcp flags & (syn | ack) == syn tcp doff 5 counter drop comment "malformed: SYN without options"',
                'tcp flags & (fin | syn) == fin | syn counter drop comment "malformed: SYN and FIN"',
                'tcp flags & (syn | rst) == syn | rst counter drop comment "malformed: SYN and RST"',
                'tcp flags & (fin | syn | rst | psh | ack | urg) == 0x0 counter drop comment "malformed: no flags"',
                'tcp flags & (fin | ack) == fin counter drop comment "malformed: FIN without ACK"',
            ),
        ),
        Chain(
            "shape",
            (f"oifname vmap {{ {', '.join(shape_paths)} }}",),
            "filter",
            "postrouting",
            "mangle",
            "accept",
        ),
        Chain(
            "shape_down",
            (
                # A /64 of shape6_net holds no address of shape6 (those are in shared /64s):
                # a hit in the first returns.
                "meta priority set ip daddr map @shape4",
                f"meta priority set ip6 daddr & {NET64_MASK} map @shape6_net return",
                "meta priority set ip6 daddr map @shape6",
            ),
        ),
        Chain(
            "shape_up",
            (
                "meta priority set ip saddr map @shape4",
                f"meta priority set ip6 saddr & {NET64_MASK} map @shape6_net return",
                "meta priority set ip6 saddr map @shape6",
            ),
        ),
        Chain(
            "srcnat",
            (f"oifname {up} snat ip to ip saddr map @src_nat",),
            "nat",
            "postrouting",
            "srcnat",
            "accept",
        ),
        *(
            (Chain("quota_out", quota_out4, "filter", "postrouting", "srcnat + 1", "accept"),)
            if quota_out4
            else ()
        ),
        Chain(
            "account",
            # What crosses the uplink, counted in the accounting sets' elements (a lookup
            # bumps the matching element's counter); before srcnat: device addresses.
            (f"iifname . oifname vmap {{ {', '.join(account_paths)} }}",),
            "filter",
            "postrouting",
            "mangle + 1",
            "accept",
        ),
        Chain(
            "account_out",
            (
                # acct6n (member-owned /64s) and acct6 (addresses in shared /64s) are disjoint.
                "ip saddr @acct4_out",
                f"ip6 saddr & {NET64_MASK} @acct6n_out return",
                "ip6 saddr @acct6_out",
            ),
        ),
        Chain(
            "account_in",
            (
                "ip daddr @acct4_in",
                f"ip6 daddr & {NET64_MASK} @acct6n_in return",
                "ip6 daddr @acct6_in",
            ),
        ),
        *syn_out,
        *fast_path_chain,
        Chain("to_members", tuple(to_members)),
        Chain(
            "walled",
            (
                # An unregistered device (a lease from a registration range): the portal and
                # the resolvers only. The counter is the "dropped from the walled garden" figure.
                "ip daddr @walled4 tcp dport { 80, 443 } accept",
                "ip daddr @dns4 meta l4proto { tcp, udp } th dport 53 accept",
                # Refused, not dropped: browsers and OS connectivity checks fail at once and
                # show the sign-in instead of waiting for a timeout.
                'meta l4proto tcp counter reject with tcp reset comment "walled garden: unregistered device"',
                'counter reject with icmp type admin-prohibited comment "walled garden: unregistered device"',
            ),
        ),
    )


_class_order = operator.attrgetter("major", "minor", "rate_kbit", "ceil_kbit")
# The last shapers' classes: (members tuple, (mq, queues), down, up); see _LAST_MEMBER_SETS.
_LAST_CLASSES: (
    tuple[tuple[Member, ...], tuple[bool, int], tuple[HtbClass, ...], tuple[HtbClass, ...]] | None
) = None


def shapers(snapshot: Snapshot) -> tuple[Shaper, ...]:
    """HTB trees: download on member-side interfaces, upload on uplinks; one class per member."""
    global _LAST_CLASSES
    host = snapshot.host
    mq = host.shaping_root is ShapingRoot.MQ
    layout = (mq, host.tx_queues if mq else 0)
    last = _LAST_CLASSES
    if last is not None and last[0] is snapshot.members and last[1] == layout:
        down, upc = last[2], last[3]
    else:
        shaped = [m for m in snapshot.members if m.shaping is not None]
        minors = class_minors(m.id for m in shaped)
        down_list: list[HtbClass] = []
        up_list: list[HtbClass] = []
        for m in shaped:
            assert m.shaping is not None  # noqa: S101  (narrowing for the type checker)
            major = class_major(host, m.id)
            minor = minors[m.id]
            down_list.append(HtbClass(major, minor, m.shaping.down_kbit, m.shaping.down_kbit))
            up_list.append(HtbClass(major, minor, m.shaping.up_kbit, m.shaping.up_kbit))
        down_list.sort(key=_class_order)  # HtbClass order, compared in C (not its __lt__)
        up_list.sort(key=_class_order)
        down, upc = tuple(down_list), tuple(up_list)
        _LAST_CLASSES = (snapshot.members, layout, down, upc)
    out = [
        Shaper(dev, host.shaping_root, host.tx_queues, host.link_kbit, down)
        for dev in host.member_interfaces
    ]
    out += [
        Shaper(dev, host.shaping_root, host.tx_queues, host.link_kbit, upc)
        for dev in host.uplink_interfaces
    ]
    return tuple(sorted(out, key=lambda s: s.dev))


def build(snapshot: Snapshot) -> Ruleset:
    """Compile a snapshot into the IR of one host."""
    sets = policy_sets(snapshot.policy)
    sets += member_sets(snapshot)
    sets.sort(key=lambda s: s.name)
    table = Table(
        TABLE_FAMILY,
        TABLE_NAME,
        tuple(sets),
        chains(snapshot.host, snapshot.policy),
        flowtables(snapshot.host),
    )
    return Ruleset(snapshot.host.name, (table,), shapers(snapshot))
