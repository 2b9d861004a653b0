"""The sets and maps of the table: the policy's, the quota's and every per-member element.

The per-member elements are the hot loop of the compiler (`member_sets`); what it reuses from
the last compile lives in `memo`."""

import ipaddress

from workers.ruleset.host import Policy
from workers.ruleset.ir import SetDef
from workers.ruleset.member import Member
from workers.ruleset.memo import MEMO, Entries, MemberSets, Parts
from workers.ruleset.shaping import HTB_ROOT_MAJOR, class_minors, queue_major
from workers.ruleset.snapshot import Snapshot
from workers.ruleset.spelling import _AF6, NET64_MASK, _ntoa, _ntop, capacity, fmt4, merge_ranges
from workers.ruleset.values import (
    _L4,
    PortRange,
    PortRule,
    Protocol,
    ShapingRoot,
    gc_paused,
)

# ------------------------------------------------------------------------------------ concerns


# Blocked ports up to this many (protocol, port) pairs are one element each in a hash set;
# beyond it, ranges in an interval set. A concatenated interval set is a pipapo set, whose
# lookup (AVX2, saving the interrupted task's FPU registers) cost about 0.45 us per new flow
# here, against a hash lookup's ~0.05: every new inbound flow looks up blocked_in, every new
# outbound flow blocked_out (docs/ruleset.md, "Layout").
PORT_SET_HASH_LIMIT = 4096


def _port_rule_set(name: str, rules: tuple[PortRule, ...]) -> SetDef:
    """Blocked ports: one hash element per (protocol, port) while they are few, else ranges."""
    per_proto: dict[str, list[PortRange]] = {}
    for r in rules:
        for p in r.protocol.l4:
            per_proto.setdefault(p, []).append(r.ports)
    merged = {p: merge_ranges(per_proto[p]) for p in sorted(per_proto)}
    pairs = sum(r.last - r.first + 1 for ranges in merged.values() for r in ranges)
    key = "inet_proto . inet_service"
    if pairs > PORT_SET_HASH_LIMIT:
        elements = tuple(f"{p} . {r}" for p, ranges in merged.items() for r in ranges)
        return SetDef(name, key, None, ("interval",), elements)
    elements = tuple(
        f"{p} . {port}"
        for p, ranges in merged.items()
        for r in ranges
        for port in range(r.first, r.last + 1)
    )
    return SetDef(name, key, None, (), elements, capacity(pairs))


def policy_sets(policy: Policy) -> list[SetDef]:
    """Management networks and the like (small interval sets) and blocked ports."""
    nets4 = [n for n in policy.management_networks if n.version == 4]
    nets6 = [n for n in policy.management_networks if n.version == 6]
    mgmt4 = tuple(str(n) for n in ipaddress.collapse_addresses(nets4))
    mgmt6 = tuple(str(n) for n in ipaddress.collapse_addresses(nets6))
    interval = ("interval",)
    reg4 = ipaddress.collapse_addresses(policy.registration_networks)
    return [
        _port_rule_set("blocked_in", policy.blocked_inbound),
        _port_rule_set("blocked_out", policy.blocked_outbound),
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


def _own_prefixes(m: Member) -> tuple[int, ...]:
    """The /64s (upper 64 bits) of a member's device addresses, in first-seen order."""
    return tuple(dict.fromkeys(a._ip >> 64 for d in m.devices for a in d.ipv6))  # type: ignore[attr-defined]


def _member_elements(m: Member, classid: str, shared: set[int], syn: bool = True) -> Parts:
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
    host = snapshot.host
    mq = host.shaping_root is ShapingRoot.MQ
    queues = host.tx_queues
    syn = snapshot.policy.syn_proxy
    key = (host.name, syn)  # the syn_fwd4 elements are there or not
    # The second host of a pair compiles the same members right after the first: the sets
    # depend on nothing else of the host than its HTB layout, so they are the first's.
    pair_key = (mq, queues if mq else 0, syn, host.fast_path)
    last = MEMO.member_sets
    if last is not None and last.members is snapshot.members and last.layout == pair_key:
        MEMO.store_elements(key, last.entries)
        return list(last.sets)
    minors = class_minors(m.id for m in snapshot.members if m.shaping is not None)
    shared = _shared_prefixes(snapshot)
    cache = MEMO.elements.get(key, {})
    fresh: Entries = {}
    out: list[list[str]] = [[] for _ in range(16)]
    extend = [lst.extend for lst in out]
    elements_of = _member_elements
    with gc_paused():
        for m in snapshot.members:
            mid = m.id
            classid = ""
            if m.shaping is not None:
                major = queue_major(mid % queues, queues) if mq else HTB_ROOT_MAJOR
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
    MEMO.store_elements(key, fresh)
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
        _hash_set("src_nat", "ipv4_addr", "ipv4_addr", out[SRC_NAT]),
        *(fast_path_sets(out) if host.fast_path else ()),
    ]
    MEMO.member_sets = MemberSets(snapshot.members, pair_key, tuple(result), fresh)
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
    argument"): the shaped addresses and the public side of every forward per protocol.
    (IPv6 anti-spoofing looks its keys up in acct6n_out / acct6_out, negated: no copies.)"""
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
    crosses the uplink (chains `account_in` / `account_out`). IPv4 per device with a public address (the others
    cannot reach the uplink), IPv6 per member /64 (per address in a shared /64). The `out`
    sets are also the anti-spoofing sets (with nopub4; chains.py looks them up negated, which
    bumps no counter), so their keys must stay those of anti-spoofing: one per device IPv4 of a
    member with a public IPv4, member /64 and shared address. One set per direction, since an
    element has one counter."""
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
