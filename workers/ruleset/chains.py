"""The fixed rule skeleton: chains and flowtables, from the host's interfaces and the policy."""

import ipaddress

from workers.ruleset.host import Host, Policy
from workers.ruleset.ir import Chain, Flowtable
from workers.ruleset.sets import quota_rules
from workers.ruleset.spelling import NET64_MASK, _ifset

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
