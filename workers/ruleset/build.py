"""Snapshot -> IR: one small function per concern, all output in canonical order.

The structure (tables, chains, rules, set definitions, shaper roots) depends only on the host and
on the size class of each hash set (see `capacity`), never on member data itself, so a change of
members, devices, forwards, openings or shaping is an element change that `diff` can apply
incrementally. Per-packet work is a fixed handful of rules and set/map lookups, whatever the
number of members:

    early (raw): malformed TCP (a well-formed SYN leaves after two rules), spoofed sources,
               DNS with the resolvers untracked (`th dport 53` / `th sport 53` first)
    forward:   ct invalid drop -> ONE `iifname . oifname vmap`: member side -> uplink goes to
               from_members (established: shaped and counted; new: anti-spoofing, no Internet
               without public IPv4, blocked outbound ports), uplink -> member side to
               to_members (established: shaped and counted; new: blocked inbound ports by the
               original port, i.e. before DNAT; DNATed, or IPv6 opening by address . proto .
               port / range / all); every accept there is `goto out_pass` / `goto in_pass`
               (shaped, then counted) -> other pairs: established accepted, management
               sources accepted (shaped by `oifname` in `pass`)
    input / output: blocked inbound ports to the host itself; the host's own packets shaped.
               No prerouting (mangle) or postrouting chain of this table: a forwarded packet
               meets the raw, forward and NAT hooks only (issue 26: a hook each less)
    dstnat:    (table ip portal_nat: IPv6 meets no NAT hook) anything not from the uplink
               leaves after one comparison; then dnat via maps keyed ip daddr . th dport, one
               per protocol (fwd_tcp, fwd_udp, and fwd_both behind `meta l4proto { tcp, udp }`: one element for a "both" forward);
               equal port ranges in the interval map fwd_ranges (address . proto . range);
               shifted ranges expanded to single ports (nft has no offset NAT)
    srcnat:    (ip portal_nat) snat via map src_nat: device IPv4 -> member's public IPv4
    shaping:   shape_down / shape_up: meta priority set ip daddr/saddr
               map @shape4, ip6 ... & ffff:ffff:ffff:ffff:: map @shape6_net (a member's own /64)
               or map @shape6 (addresses in a shared /64)
    account:   account_in / account_out (reached from in_pass / out_pass, before srcnat):
               what crosses the uplink bumps the counter of its element in acct4_in/out (device IPv4), acct6n_in/out
               (member /64, masked) or acct6_in/out (shared /64's address)
    blocked ports (blocked_in, blocked_out): one hash element per protocol . port (up to
               sets.PORT_SET_HASH_LIMIT pairs; beyond it ranges in an interval set): every new
               flow looks one of them up, and a concatenated interval set is a pipapo set

Per-packet cost: an interface name (`iifname`/`oifname`) is copied into a register in every
rule that reads it; the hooks every packet meets read it once (a vmap or a guard rule) or only
after a cheaper test (the DNS port before the interface; `ct state new` before it).

Anti-spoofing and SNAT are separate concerns: every device IPv4 is in exactly one of acct4_out
(src_nat's keys: member has a public IPv4) and nopub4 (member has none), and the anti-spoofing
rule accepts a source found in either, so a member without public IPv4 is not a spoofer; its
IPv4 towards the uplink is dropped by its own rule ("member without public IPv4: no Internet via
NAT"), IPv6 works. The anti-spoofing lookups are negated lookups in the outbound accounting sets
(acct4_out, acct6n_out, acct6_out), which bump no counter: no separate copy of these keys is
loaded (issue 26: 333,000 fewer elements at 100,000 members).
IPv6 anti-spoofing and shaping use one element per /64 owned by a single member (masked lookup)
and per-address elements only in a /64 that devices of several members share (a double room),
so no member can send from another member's addresses.

The concerns, one module each: `sets` (the policy's and quota's sets, every per-member element:
the compiler's hot loop), `chains` (the fixed rule skeleton and the flowtable), `shaping` (HTB
classes and shaper trees), `spelling` (how nft spells addresses and sizes a hash set). `build`
puts them into two tables: `inet portal_fw` (everything but NAT) and `ip portal_nat` (the NAT
chains and the maps only they read: fwd_*, src_nat). NAT in the inet table gave every new IPv6
connection a NAT null binding it never used; in an `ip` table IPv6 meets no NAT hook. One
`nft -f` text holds both tables, so a full load (and a rollback) replaces both in one kernel
transaction, and a host that ran the single inet table gets the two in that same transaction.
"""

from __future__ import annotations

from workers.ruleset.chains import chains, flowtables, nat_chains
from workers.ruleset.ir import Ruleset, SetDef, Table
from workers.ruleset.sets import member_sets, policy_sets
from workers.ruleset.shaping import shapers
from workers.ruleset.snapshot import Snapshot

TABLE_FAMILY = "inet"
TABLE_NAME = "portal_fw"  # the firewall helper accepts only tables named portal_*
NAT_TABLE_FAMILY = "ip"
NAT_TABLE_NAME = "portal_nat"
# The maps only the NAT chains read: they live in the NAT table alone (moved, not copied, so an
# increment touches each element once and the kernel holds it once).
NAT_SETS = frozenset({"fwd_both", "fwd_ranges", "fwd_tcp", "fwd_udp", "src_nat"})
# Small policy sets that both tables read (the captive portal's DNAT and the walled garden):
# copied into the NAT table, only when the captive portal is on.
CAPTIVE_SETS = frozenset({"reg4", "walled4"})


def build(snapshot: Snapshot) -> Ruleset:
    """Compile a snapshot into the IR of one host: the filter table, then the NAT table."""
    sets = policy_sets(snapshot.policy)
    sets += member_sets(snapshot)
    sets.sort(key=lambda s: s.name)
    captive = snapshot.policy.captive_proxy is not None
    fw_sets: list[SetDef] = []
    nat_sets: list[SetDef] = []
    for s in sets:
        if s.name in NAT_SETS:
            nat_sets.append(s)
            continue
        fw_sets.append(s)
        if captive and s.name in CAPTIVE_SETS:
            nat_sets.append(s)
    table = Table(
        TABLE_FAMILY,
        TABLE_NAME,
        tuple(fw_sets),
        chains(snapshot.host, snapshot.policy),
        flowtables(snapshot.host),
    )
    nat = Table(
        NAT_TABLE_FAMILY,
        NAT_TABLE_NAME,
        tuple(nat_sets),
        nat_chains(snapshot.host, snapshot.policy),
    )
    return Ruleset(snapshot.host.name, (table, nat), shapers(snapshot))
