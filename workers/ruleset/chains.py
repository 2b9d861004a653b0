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
    in `shape_down` / `shape_up` would never classify them into the member's HTB class (they would land in the
    default class, unshaped). In forward the member side is the device address both ways
    (outbound: source before SNAT; inbound: destination after DNAT or the reverse SNAT), so
    the shaping maps' keys decide. The counter counts the packets that offered their flow
    (one per flow, and again only when a flow comes back from the flowtable)."""
    if not host.fast_path:
        return (), ()
    net6 = NET64_MASK
    est6 = "ct state established meta nfproto ipv6 meta l4proto { tcp, udp }"
    uplinks = _ifset(host.uplink_interfaces)
    offer = (
        "ct state established ct status dnat jump forward_kept",
        # IPv6: a flow started from the uplink side (its original direction arrives there) came
        # in through an opening (or from a management source): the same check as forward_kept,
        # against the openings. Told by the flow's direction, not by its device's address: a
        # removed device's address is in no set any more, and its flows must end as well.
        f"{est6} iifname {uplinks} ct direction original jump opening_kept",
        f"{est6} oifname {uplinks} ct direction reply jump opening_kept",
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
    if policy.syn_proxy:
        # A SYN to a forwarded TCP port is not tracked (matched on the public address and port:
        # before DNAT); the forward chain answers it with a SYN cookie, and the client's ACK
        # (invalid without an entry) makes the proxy open the connection to the device. That
        # SYN leaves the host itself, so DNAT also runs in the output hook (`nat_chains`).
        syn_untracked = (
            f"iifname {up} tcp flags & (fin | syn | rst | ack) == syn"
            " ip daddr . tcp dport @syn_fwd4 notrack",
        )
        syn_proxy = (
            f"iifname {up} ct state invalid,untracked ip daddr . tcp dport @syn_fwd4 counter"
            ' synproxy mss 1460 wscale 7 timestamp sack-perm comment "SYN proxy: forwarded TCP ports"',
        )
    # The management networks' sources: from their own link only when the host has one (a
    # management source arriving from pl-inet or pl-dorm is then a spoof); otherwise from either
    # side, checked only where a packet would be dropped (no lookup on a member's own flows).
    management = ("ip saddr @mgmt4 accept", "ip6 saddr @mgmt6 accept")
    mgmt_on_sides = () if host.management_interfaces else management
    # Blocked inbound ports of a new flow from the uplink, by its original destination port
    # (before DNAT: a forward's public port). Checked where the flow's path is decided (in the
    # forward chain, and in `input` for the host itself), not in a prerouting chain of its own:
    # a base chain is a hook more on every packet.
    # (nft 1.0.6 wants the protocol for `ct original proto-dst` in a concatenation.) No rule
    # while the policy blocks nothing (the default).
    blocked_in = tuple(
        f"meta l4proto {p} meta l4proto . ct original proto-dst @blocked_in drop"
        for p in ("tcp", "udp")
        if policy.blocked_inbound
    )
    to_members = [
        # What comes from the uplink to the member side: already-accepted flows (and DNS with
        # the resolvers, untracked) are shaped and counted at once; a new flow passes the
        # blocked ports, the quotas and then a forward, an opening or a management source.
        "ct state established,related goto in_pass",
        "ct state untracked ip saddr @dns4 meta l4proto { tcp, udp } th sport 53 goto in_pass",
        *blocked_in,
        *quota_in,
        "ct status dnat goto in_pass",
        # Most openings name ports: their lookup first, "all ports" last.
        "ip6 daddr . meta l4proto . th dport @open6_ports goto in_pass",
        "ip6 daddr . meta l4proto . th dport @open6_ranges goto in_pass",
        "ip6 daddr @open6_all goto in_pass",
        *(r.replace(" accept", " goto in_pass") for r in mgmt_on_sides),
    ]
    if policy.inbound_icmpv6_echo:
        to_members.append("icmpv6 type echo-request goto in_pass")
    to_members.append("drop")
    # ONE lookup per forwarded packet sends it to its path (interface pair -> chain): the
    # member side -> uplink (`from_members`) and back (`to_members`), where an accepted packet
    # is shaped and counted (`out_pass` / `in_pass`) in the same chain walk; there is no
    # postrouting or mangle prerouting chain of ours on a forwarded packet's way (each was a
    # hook, an interface lookup and a few rules more on every packet; issue 26). The other
    # pairs (between the sides, from a management link) meet the second lookup, for
    # management sources only; pairs named in neither meet the drop policy.
    sides = (*host.member_interfaces, *host.uplink_interfaces)
    uplink_paths = [
        f'"{i}" . "{o}" : goto from_members'
        for i in host.member_interfaces
        for o in host.uplink_interfaces
    ]
    uplink_paths += [
        f'"{i}" . "{o}" : goto to_members'
        for i in host.uplink_interfaces
        for o in host.member_interfaces
    ]
    paths = []
    for i in (*sides, *host.management_interfaces):
        for o in sides:
            if i in host.member_interfaces and o in host.uplink_interfaces:
                continue
            if i in host.uplink_interfaces and o in host.member_interfaces:
                continue
            if host.management_interfaces and i not in host.management_interfaces:
                continue  # between the sides, no management source is genuine
            paths.append(f'"{i}" . "{o}" : jump management')
    # Anything else that leaves on a side (the other pairs' forwarded packets, the host's own
    # packets in `output`): one `oifname` lookup to the shaping chains.
    shape_paths = [f'"{o}" : jump shape_down' for o in host.member_interfaces]
    shape_paths += [f'"{o}" : jump shape_up' for o in host.uplink_interfaces]
    fast_path_offer, fast_path_chain = fast_path_rules(host)
    if mgmt_on_sides:
        not_device = ("jump foreign4", "jump foreign6")
    else:
        not_device = (
            'counter drop comment "anti-spoofing: IPv4 source is no device address"',
            'counter drop comment "anti-spoofing: IPv6 source is no device address"',
        )
    return (
        Chain(
            "forward",
            (
                # Every path a host forwards is named here; anything else (the sync and the
                # management links above all) meets the drop policy, counted in the last rule.
                *fast_path_offer,
                # Before the path lookup, for every path: the SYN proxy (untracked SYNs and
                # their ACKs to a forward's public address) and invalid packets, one counter
                # each.
                *syn_proxy,
                "ct state invalid counter drop",
                f"iifname . oifname vmap {{ {', '.join(uplink_paths)} }}",
                "ct state established,related goto pass",
                *(f"ct state new iifname {up} {r}" for r in blocked_in),
                *((f"iifname . oifname vmap {{ {', '.join(paths)} }}",) if paths else ()),
                'counter comment "no allowed path: dropped by the policy"',
            ),
            "filter",
            "forward",
            "filter",
            "drop",
        ),
        Chain(
            "pass",
            (f"oifname vmap {{ {', '.join(shape_paths)} }}", "accept"),
        ),
        *(
            (
                Chain(
                    "input",
                    (f"ct state new iifname {up} meta l4proto . th dport @blocked_in drop",),
                    "filter",
                    "input",
                    "filter",
                    "accept",
                ),
            )
            if policy.blocked_inbound
            else ()
        ),
        Chain(
            "output",
            # The host's own packets that leave on a side (its resolver's answers, the SYN
            # proxy's connections): shaped like forwarded ones. After the NAT output chain
            # (dstnat_local, -100) has routed them anew.
            (f"oifname vmap {{ {', '.join(shape_paths)} }}",),
            "filter",
            "output",
            "filter",
            "accept",
        ),
        Chain("management", tuple(r.replace(" accept", " goto pass") for r in management)),
        *(
            (
                Chain(
                    "foreign4",
                    (
                        management[0].replace(" accept", " goto out_pass"),
                        'counter drop comment "anti-spoofing: IPv4 source is no device address"',
                    ),
                ),
                Chain(
                    "foreign6",
                    (
                        management[1].replace(" accept", " goto out_pass"),
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
                # What comes from the member side to the uplink, as to_members.
                "ct state established,related goto out_pass",
                "ct state untracked ip daddr @dns4 meta l4proto { tcp, udp } th dport 53 goto out_pass",
                "ip saddr @reg4 jump walled",
                # Anti-spoofing looks up the outbound accounting sets, which hold exactly its
                # keys (sets.accounting_sets): acct4_out (src_nat's keys: a plain set, since a
                # 6.1 kernel refuses a lookup in a map that ignores the value) and nopub4 hold
                # every device IPv4 once; acct6n_out / acct6_out every member /64 and shared
                # address. A negated lookup never bumps an element's counter (a found key
                # ends the rule before the element's expressions run), so nothing is counted
                # twice, and the full load carries no separate anti-spoofing copies (issue 26).
                f"ip saddr != @acct4_out ip saddr != @nopub4 {not_device[0]}",
                f"ip6 saddr & {NET64_MASK} != @acct6n_out ip6 saddr != @acct6_out {not_device[1]}",
                f"oifname {up} ip saddr @nopub4 counter drop"
                ' comment "member without public IPv4: no Internet via NAT"',
                'meta l4proto . th dport @blocked_out counter drop comment "blocked outbound port"',
                *quota_out6,
                "goto out_pass",
            ),
        ),
        Chain(
            "early",
            (
                "meta l4proto tcp jump early_tcp",
                *spoofed,
                *syn_untracked,
                # The network's own resolvers: DNS between them and the members bypasses
                # conntrack both ways (its entries would cost more than the answers).
                # The port before anything else: every other packet passes with one load and
                # one comparison per direction (the protocol is checked on port 53 only).
                f"th dport 53 meta l4proto {{ tcp, udp }} iifname {mem} ip daddr @dns4 notrack",
                f"th sport 53 meta l4proto {{ tcp, udp }} iifname {up} ip saddr @dns4 notrack",
            ),
            "filter",
            "prerouting",
            "raw",
            "accept",
        ),
        Chain(
            "early_out",
            (
                # The host's own resolver (Unbound on its member-side address) answers: its
                # replies bypass conntrack too, so a query creates no entry at all.
                f"udp sport 53 oifname {mem} ip saddr @dns4 notrack",
                f"tcp sport 53 oifname {mem} ip saddr @dns4 notrack",
            ),
            "filter",
            "output",
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
                # A connection's first packet (SYN alone, a window, options): none of these
                # either; it leaves after two rules instead of seven.
                "tcp flags & (fin | syn | rst | ack) == syn tcp window != 0 tcp doff != 5 return",
                'tcp flags & (syn | ack) == syn tcp window 0 counter drop comment "malformed: SYN with window 0"',
                'tcp flags & (syn | ack) == syn tcp doff 5 counter drop comment "malformed: SYN without options"',
                'tcp flags & (fin | syn) == fin | syn counter drop comment "malformed: SYN and FIN"',
                'tcp flags & (syn | rst) == syn | rst counter drop comment "malformed: SYN and RST"',
                'tcp flags & (fin | syn | rst | psh | ack | urg) == 0x0 counter drop comment "malformed: no flags"',
                'tcp flags & (fin | ack) == fin counter drop comment "malformed: FIN without ACK"',
            ),
        ),
        # Accepted from the member side to the uplink and back: shaped first (shape_* returns
        # early only within itself), then counted in the accounting sets' elements (a lookup
        # bumps the matching element's counter): device addresses (srcnat comes later).
        Chain("out_pass", ("jump shape_up", "goto account_out")),
        Chain("in_pass", ("jump shape_down", "goto account_in")),
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
        *(
            (Chain("quota_out", quota_out4, "filter", "postrouting", "srcnat + 1", "accept"),)
            if quota_out4
            else ()
        ),
        Chain(
            "account_out",
            (
                # acct6n (member-owned /64s) and acct6 (addresses in shared /64s) are disjoint.
                # Reached by goto: these chains accept (a found key ends the walk).
                "ip saddr @acct4_out accept",
                f"ip6 saddr & {NET64_MASK} @acct6n_out accept",
                "ip6 saddr @acct6_out accept",
                "accept",
            ),
        ),
        Chain(
            "account_in",
            (
                "ip daddr @acct4_in accept",
                f"ip6 daddr & {NET64_MASK} @acct6n_in accept",
                "ip6 daddr @acct6_in accept",
                "accept",
            ),
        ),
        *fast_path_chain,
        Chain("to_members", tuple(to_members)),
        Chain(
            "walled",
            (
                # An unregistered device (a lease from a registration range): the portal and
                # the resolvers only. The counter is the "dropped from the walled garden" figure.
                "ip daddr @walled4 tcp dport { 80, 443 } goto out_pass",
                "ip daddr @dns4 meta l4proto { tcp, udp } th dport 53 goto out_pass",
                # Refused, not dropped: browsers and OS connectivity checks fail at once and
                # show the sign-in instead of waiting for a timeout.
                'meta l4proto tcp counter reject with tcp reset comment "walled garden: unregistered device"',
                'counter reject with icmp type admin-prohibited comment "walled garden: unregistered device"',
            ),
        ),
    )


def nat_chains(host: Host, policy: Policy) -> tuple[Chain, ...]:
    """The NAT chains, for a table of the `ip` family: IPv6 never meets a NAT hook.

    NAT chains in the `inet` table made every new IPv6 connection take a NAT null binding
    (`nf_nat_setup_info`, a clash check in the conntrack table); in an `ip` table only IPv4
    registers the NAT hooks. Hooks of different tables run by priority as if in one table:
    the inet table's raw and mangle chains before `dstnat`, its filter chains between, its
    `quota_out` (srcnat + 1) after `srcnat`."""
    up = _ifset(host.uplink_interfaces)
    mem = _ifset(host.member_interfaces)
    dnat = "dnat ip addr . port to ip daddr . th dport map"
    # Captive portal: a walled device's plain HTTP to anywhere goes to the portal's proxy, which
    # answers with a redirect to "This device is not registered" (the page names its MAC).
    captive_http: tuple[str, ...] = ()
    if policy.captive_proxy is not None:
        captive_http = (
            f"tcp dport 80 iifname {mem} ip saddr @reg4 ip daddr != @walled4"
            f" dnat ip to {policy.captive_proxy}",
        )
    syn_out: tuple[Chain, ...] = ()
    if policy.syn_proxy:
        # The SYN proxy opens the connection to the device from the host itself (see `chains`).
        syn_out = (
            Chain(
                "dstnat_local",
                (
                    f"meta l4proto tcp {dnat} @fwd_tcp",
                    f"meta l4proto tcp {dnat} @fwd_both",
                    "meta l4proto tcp dnat ip to ip daddr . meta l4proto . th dport map @fwd_ranges",
                ),
                "nat",
                "output",
                "-100",
                "accept",
            ),
        )
    return (
        Chain(
            "dstnat",
            (
                # Only what comes from the uplink has forwards: anything else leaves after one
                # comparison (the interface name is read once, not in every rule).
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
            "srcnat",
            (f"oifname {up} snat ip to ip saddr map @src_nat",),
            "nat",
            "postrouting",
            "srcnat",
            "accept",
        ),
        *syn_out,
    )
