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

The concerns, one module each: `sets` (the policy's and quota's sets, every per-member element:
the compiler's hot loop), `chains` (the fixed rule skeleton and the flowtable), `shaping` (HTB
classes and shaper trees), `spelling` (how nft spells addresses and sizes a hash set). `build`
puts them into one table.
"""

from __future__ import annotations

from workers.ruleset.chains import chains, flowtables
from workers.ruleset.ir import Ruleset, Table
from workers.ruleset.sets import member_sets, policy_sets
from workers.ruleset.shaping import shapers
from workers.ruleset.snapshot import Snapshot

TABLE_FAMILY = "inet"
TABLE_NAME = "portal_fw"  # the firewall helper accepts only tables named portal_*


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
