"""portal_fw: the portal's agent on a firewall host (Python 3.11 standard library only).

The portal's SSH key may run one program on a firewall host, its forced command `portal-fw`
(a launcher beside this package). Per SSH connection it starts ONE agent (`agent.py`) that
answers JSON-line requests from a fixed verb table (`verbs.py`), never a shell. A walk through
the package, along the path of one push:

    agent.py      the protocol: hello, one JSON line per request and per answer, typed errors
    verbs.py      the verb table: each verb's arguments, validated into typed values
    bundle.py     the bundle (apply-bundle's input) and the host's declared file artefacts
    scope.py      nft text may only touch the portal's tables; element-only increments
    apply.py      apply-bundle, confirm, rollback: check -> rollback point -> timer -> apply
    nft.py        nft: the check and the load of one transaction; nft.current + its journal
    elements.py   an element-only increment as one netlink batch (no nft process)
    tc.py         tc: the static check (tc has no dry run), apply, the canonical device text
    tctree.py     a full tc load planned against what runs: the tree kept or built anew
    rollback.py   the one rollback point (nft + tc + files + state) and the confirm timer
    digest.py     the content digest of what runs (drift), full or moved by element events
    parts.py      digest parts of the portal tables read over netlink
    netlink.py    nf_tables over netlink (dumps, element events)
    health.py     health sampling: conntrack, softirq, interfaces, the pair's daemons
    offload.py    offloaded flows of the fast path (conntrack's [OFFLOAD] entries)
    traffic.py    traffic counters of the accounting sets, carried across replacements
    ha.py         keepalived's notify hook and conntrackd's keeper (entry point portal-ha)
    pair.py       the pair's state on this host (VRRP roles, daemons, conntrackd statistics)
    kea.py        Kea's control socket (entry point kea-ctl) and the dhcp-leases verb
    unbound.py    the members' resolver: check, reload keeping the cache, stats (unbound-ctl)
    ra.py         router advertisements per device (entry point portal-ra)
    probes.py     capability probes of this host's kernel and tools (what a bundle may use)
    host.py       one host: options, state directory, lock, log
    common.py     typed errors, exit codes, running a tool
"""

# The protocol the agent speaks. The portal sends the number it expects (`agent --protocol N`);
# a different one is refused with a message naming both, and nothing is applied.
AGENT_PROTOCOL = 1
