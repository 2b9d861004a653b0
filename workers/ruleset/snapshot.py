"""The compiler's input: an immutable, validated snapshot of plain typed values.

Every value that can reach the rule-set text passes through a constructor: addresses become
`ipaddress` objects of the right family, ports become checked ints, protocols a closed
`StrEnum`, interface names a narrow character set. Free text (descriptions) is kept for the
caller's convenience but is never rendered. A refusal raises `SnapshotError` (a `ValueError`)
whose message names the offending object, e.g. ``port forward #12 of member #3: ...``.

Constructors accept the convenient spellings a selector produces (``"10.100.0.5"``, ``80``,
``(1000, 1010)``, ``"tcp"``) and normalise them; the stored values are always typed and every
tuple is sorted, so equal data gives an equal snapshot regardless of query order.

The parts live in their own modules: `values` (the value checks, `PortRange`, `Protocol`,
`SnapshotError`), `host` (`Policy`, `Host`, `Dhcp`, `Ha`, `CaptivePortalUrl`), `member`
(`Member`, `Device`, `PortForward`, `Opening`, `Shaping`) and `checks` (the checks across
members). This module holds the `Snapshot` itself and its stored form (`snapshot_to_json`,
`snapshot_from_json`), and names every part again (`__all__`): callers import the whole
input from here.
"""

from __future__ import annotations

import functools
import ipaddress
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workers.ruleset.checks import _check_global
from workers.ruleset.host import CaptivePortalUrl, Dhcp, Ha, Host, Policy, Resolver
from workers.ruleset.member import Device, Member, Opening, PortForward, Shaping, _by_id
from workers.ruleset.memo import DHCP_KEPT, MEMO
from workers.ruleset.values import (
    GC_PROMOTE_AT,
    IFNAME_RE,
    MAC_RE,
    PORT_MAX,
    PORT_MIN,
    PortRange,
    PortRule,
    Protocol,
    ShapingRoot,
    SnapshotError,
    _ipv4,
    _ipv6,
    _protocol,
    _set,
    _single_port,
    gc_paused,
    port_range,
    text4,
    text6,
)

IPv4Address = ipaddress.IPv4Address
IPv6Address = ipaddress.IPv6Address
IPv4Network = ipaddress.IPv4Network
IPv6Network = ipaddress.IPv6Network
IPNetwork = IPv4Network | IPv6Network


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one firewall host needs: policy, host, members (sorted by id), cross-checked."""

    policy: Policy
    host: Host
    members: tuple[Member, ...] = ()
    dhcp: Dhcp | None = None  # None: the host runs no DHCP server
    ha: Ha | None = None  # None: a single host, no failover
    resolver: Resolver | None = None  # None: the host runs no resolver (Unbound)

    def __post_init__(self) -> None:
        if self.resolver is not None and type(self.resolver) is not Resolver:
            raise SnapshotError("snapshot: resolver is not a Resolver")
        if self.dhcp is not None and not isinstance(self.dhcp, Dhcp):
            raise SnapshotError("snapshot: dhcp is not a Dhcp")
        if self.ha is not None and not isinstance(self.ha, Ha):
            raise SnapshotError("snapshot: ha is not an Ha")
        if not isinstance(self.policy, Policy):
            raise SnapshotError("snapshot: policy is not a Policy")
        if not isinstance(self.host, Host):
            raise SnapshotError("snapshot: host is not a Host")
        if not isinstance(self.members, tuple | list):
            raise SnapshotError("snapshot: members must be a tuple")
        for m in self.members:
            if type(m) is not Member:
                raise SnapshotError(f"snapshot: {m!r} is not a Member")
        members = self.members
        ids = [m.id for m in members]
        if not (isinstance(members, tuple) and ids == sorted(ids)):
            members = tuple(sorted(members, key=_by_id))
        # A tuple in order is kept as it is: the hosts of a pair built from one read then share
        # one members tuple, which the compiler recognises (memo.MEMO.member_sets).
        _set(self, "members", members)
        _check_global(self.host, members)

    def to_json(self) -> str:
        """Compact, deterministic JSON of this snapshot (see `snapshot_to_json`)."""
        return snapshot_to_json(self)

    @classmethod
    def from_json(cls, text: str | bytes) -> Snapshot:
        """The snapshot stored by `to_json`, validated again (see `snapshot_from_json`)."""
        return snapshot_from_json(text)


SNAPSHOT_FORMAT = 1


def _ports_out(r: PortRange | None) -> int | list[int] | None:
    if r is None:
        return None
    return r.first if r.first == r.last else [r.first, r.last]


def _ports_in(value: Any, what: str) -> PortRange:
    if type(value) is int:
        return _single_port(value) if PORT_MIN <= value <= PORT_MAX else PortRange.of(value, what)
    if isinstance(value, list) and len(value) == 2:
        return PortRange.of(tuple(value), what)
    raise SnapshotError(f"{what}: {value!r} is not a port or [first, last]")


def _trim(row: list[Any]) -> list[Any]:
    """Drop trailing defaults (empty lists, None, True) so rows stay short."""
    while row and row[-1] in ([], None):
        row.pop()
    return row


def _member_out(m: Member) -> list[Any]:
    return _trim(
        [
            m.id,
            None if m.public_ipv4 is None else text4(m.public_ipv4),
            [
                _trim([d.id, None if d.ipv4 is None else text4(d.ipv4), [text6(a) for a in d.ipv6]])
                for d in m.devices
            ],
            [
                [
                    f.id,
                    f.protocol,  # a StrEnum: json writes its text
                    _ports_out(f.public_ports),
                    f.device_id,
                    _ports_out(f.target_ports),
                    *(() if f.enabled else (0,)),
                ]
                for f in m.forwards
            ],
            [_trim([o.id, o.device_id, o.protocol, _ports_out(o.ports)]) for o in m.openings],
            None if m.shaping is None else [m.shaping.down_kbit, m.shaping.up_kbit],
            [str(p) for p in m.ipv6_prefixes],
        ]
    )


def _pad(row: list[Any], n: int, defaults: tuple[Any, ...]) -> list[Any]:
    if not isinstance(row, list) or not 1 <= len(row) <= n:
        raise SnapshotError(f"snapshot json: {row!r} is not a row of at most {n} fields")
    return row + list(defaults[len(row) - n :]) if len(row) < n else row


def _member_in(row: Any) -> Member:
    mid, pub, devices, forwards, openings, shaping, prefixes = _pad(
        row, 7, (None, None, [], [], [], None, [])
    )
    devs = []
    for d in devices:
        did, v4, v6 = _pad(d, 3, (None, None, []))
        devs.append(
            Device(
                did,
                None if v4 is None else _ipv4(v4, f"device #{did} ipv4"),
                tuple(_ipv6(a, f"device #{did} ipv6") for a in v6),
            )
        )
    fwds = []
    for f in forwards:
        if not isinstance(f, list) or len(f) not in (5, 6):
            raise SnapshotError(f"snapshot json: {f!r} is not a port forward row")
        what = f"port forward #{f[0]}"
        fwds.append(
            PortForward(
                f[0],
                _protocol(f[1], what),
                _ports_in(f[2], f"{what} public ports"),
                f[3],
                _ports_in(f[4], f"{what} target ports"),
                len(f) == 5,
            )
        )
    opens = []
    for o in openings:
        oid, dev, proto, ports = _pad(o, 4, (None, None, None, None))
        what = f"IPv6 opening #{oid}"
        opens.append(
            Opening(
                oid, dev, _protocol(proto, what), None if ports is None else _ports_in(ports, what)
            )
        )
    return Member(
        mid,
        None if pub is None else _ipv4(pub, f"member #{mid} public_ipv4"),
        tuple(devs),
        tuple(fwds),
        tuple(opens),
        None if shaping is None else Shaping(*shaping),
        tuple(prefixes),
    )


def snapshot_to_json(snapshot: Snapshot) -> str:
    """Compact, deterministic JSON: equal snapshots give identical text (ASCII, no spaces).

    Members are rows of positional fields with trailing defaults dropped. Descriptions are not
    stored (they never reach the rule set and do not take part in equality). The text is what
    ``json.dumps(doc, separators=(",", ":"), sort_keys=True)`` gives for the whole document; the
    member rows are dumped one by one so that unchanged members' rows can be reused.
    """
    p, h = snapshot.policy, snapshot.host
    head = {
        "format": SNAPSHOT_FORMAT,
        "host": {
            "name": h.name,
            "uplink_interfaces": list(h.uplink_interfaces),
            "member_interfaces": list(h.member_interfaces),
            "shaping_root": h.shaping_root.value,
            "tx_queues": h.tx_queues,
            "link_kbit": h.link_kbit,
            "private_networks": [str(n) for n in h.private_networks],
            "public_networks": [str(n) for n in h.public_networks],
            "management_interfaces": list(h.management_interfaces),
            **({"fast_path": True} if h.fast_path else {}),
        },
    }
    if snapshot.ha is not None:  # absent for a single host: older stored snapshots stay equal
        head["ha"] = _ha_out(snapshot.ha)
    tail = {
        "policy": {
            "management_networks": [str(n) for n in p.management_networks],
            "blocked_outbound": [
                [r.protocol.value, _ports_out(r.ports)] for r in p.blocked_outbound
            ],
            "blocked_inbound": [[r.protocol.value, _ports_out(r.ports)] for r in p.blocked_inbound],
            "inbound_icmpv6_echo": p.inbound_icmpv6_echo,
            "registration_networks": [str(n) for n in p.registration_networks],
            "portal_addresses": [str(a) for a in p.portal_addresses],
            "dns_servers": [str(a) for a in p.dns_servers],
            **({"captive_proxy": str(p.captive_proxy)} if p.captive_proxy else {}),
            **({"conntrack_quota_out": p.conntrack_quota_out} if p.conntrack_quota_out else {}),
            **({"conntrack_quota_in": p.conntrack_quota_in} if p.conntrack_quota_in else {}),
            **({"syn_proxy": True} if p.syn_proxy else {}),
        },
        # after "policy" in key order; absent without a resolver (older snapshots stay equal)
        **({"resolver": snapshot.resolver.to_doc()} if snapshot.resolver is not None else {}),
    }
    dump = functools.partial(json.dumps, separators=(",", ":"), sort_keys=True, ensure_ascii=True)
    # A member's row is reused while it is the same object (MEMO.member_json: the last call's).
    cache, fresh, rows = MEMO.member_json, {}, []
    for m in snapshot.members:
        hit = cache.get(m.id)
        if hit is None or hit[0] is not m:
            hit = (m, dump(_member_out(m)))
        fresh[m.id] = hit
        rows.append(hit[1])
    MEMO.member_json = fresh
    # "dhcp" sorts before every other key of the head, as the dump needs.
    dhcp = _dhcp_json(snapshot.dhcp, dump)
    return f'{{"dhcp":{dhcp},{dump(head)[1:-1]},"members":[{",".join(rows)}],{dump(tail)[1:]}'


def _dhcp_json(d: Dhcp | None, dump: Callable[[Any], str]) -> str:
    """The JSON of `d`, reused while it is the same object (the worker keeps one while no
    reservation changes; its 60,000 rows need not be dumped again)."""
    kept = MEMO.dhcp_json
    hit = kept.get(id(d))
    if hit is not None and hit[0] is d:
        return hit[1]
    text = dump(_dhcp_out(d))
    if d is not None:
        while len(kept) >= DHCP_KEPT:
            kept.pop(next(iter(kept)))
        kept[id(d)] = (d, text)
    return text


def _dhcp_out(d: Dhcp | None) -> dict[str, Any] | None:
    if d is None:
        return None
    return {
        "network": str(d.network),
        "router": str(d.router),
        "dns_servers": [str(a) for a in d.dns_servers],
        "domain": d.domain,
        "lease_seconds": d.lease_seconds,
        "registration_lease_seconds": d.registration_lease_seconds,
        "pools": [[str(a), str(b)] for a, b in d.pools],
        "reservations": [[mac, str(ip)] for mac, ip in d.reservations],
        "control_socket": d.control_socket,
        "lease_file": d.lease_file,
        "interfaces": list(d.interfaces),
        "ra_prefixes": [[mac, str(net)] for mac, net in d.ra_prefixes],
        "ra_pid_file": d.ra_pid_file,
        **({"captive_portal": d.captive_portal.text} if d.captive_portal else {}),
    }


def _ha_out(ha: Ha) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in Ha.__dataclass_fields__:
        value = getattr(ha, name)
        if name in ("addresses4", "addresses6"):
            value = [list(pair) for pair in value]
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, IPv4Address | IPv6Address):
            value = str(value)
        out[name] = value
    return out


def _ha_in(doc: Any) -> Ha | None:
    if doc is None:
        return None
    if not isinstance(doc, dict) or not set(doc) <= set(Ha.__dataclass_fields__):
        raise SnapshotError("snapshot json: ha is not an object of Ha's fields")
    values: dict[str, Any] = {
        k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
        for k, v in doc.items()
    }
    return Ha(**values)


def _dhcp_in(doc: Any) -> Dhcp | None:
    if doc is None:
        return None
    return Dhcp(
        network=doc["network"],
        router=doc["router"],
        dns_servers=tuple(doc["dns_servers"]),
        domain=doc["domain"],
        lease_seconds=doc["lease_seconds"],
        registration_lease_seconds=doc["registration_lease_seconds"],
        pools=tuple(tuple(pair) for pair in doc["pools"]),
        reservations=tuple(tuple(pair) for pair in doc["reservations"]),
        control_socket=doc["control_socket"],
        lease_file=doc["lease_file"],
        interfaces=tuple(doc.get("interfaces", ())),
        ra_prefixes=tuple(tuple(pair) for pair in doc.get("ra_prefixes", ())),
        ra_pid_file=doc.get("ra_pid_file", "/run/portal-ra.pid"),
        captive_portal=CaptivePortalUrl(doc["captive_portal"])
        if doc.get("captive_portal")
        else None,
    )


def snapshot_from_json(text: str | bytes) -> Snapshot:
    """The snapshot `snapshot_to_json` wrote; every value is validated again on the way in."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise SnapshotError(f"snapshot json: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != SNAPSHOT_FORMAT:
        raise SnapshotError(f"snapshot json: not format {SNAPSHOT_FORMAT}")
    try:
        p, h = doc["policy"], doc["host"]

        def rules(rows: list[list[Any]]) -> tuple[PortRule, ...]:
            return tuple(PortRule(_protocol(a, "policy"), _ports_in(b, "policy")) for a, b in rows)

        policy = Policy(
            management_networks=tuple(p["management_networks"]),
            blocked_outbound=rules(p["blocked_outbound"]),
            blocked_inbound=rules(p["blocked_inbound"]),
            inbound_icmpv6_echo=p["inbound_icmpv6_echo"],
            registration_networks=tuple(p.get("registration_networks", ())),
            portal_addresses=tuple(p.get("portal_addresses", ())),
            dns_servers=tuple(p.get("dns_servers", ())),
            captive_proxy=p.get("captive_proxy"),
            conntrack_quota_out=p.get("conntrack_quota_out", 0),
            conntrack_quota_in=p.get("conntrack_quota_in", 0),
            syn_proxy=p.get("syn_proxy", False),
        )
        host = Host(
            name=h["name"],
            uplink_interfaces=tuple(h["uplink_interfaces"]),
            member_interfaces=tuple(h["member_interfaces"]),
            shaping_root=h["shaping_root"],
            tx_queues=h["tx_queues"],
            link_kbit=h["link_kbit"],
            private_networks=tuple(h["private_networks"]),
            public_networks=tuple(h["public_networks"]),
            management_interfaces=tuple(h.get("management_interfaces", ())),
            fast_path=h.get("fast_path", False),
        )
        members = tuple(_member_in(row) for row in doc["members"])
        dhcp = _dhcp_in(doc.get("dhcp"))
        ha = _ha_in(doc.get("ha"))
        resolver = Resolver.from_doc(doc["resolver"]) if doc.get("resolver") else None
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, SnapshotError):
            raise
        raise SnapshotError(f"snapshot json: {type(exc).__name__}: {exc}") from None
    return Snapshot(policy=policy, host=host, members=members, dhcp=dhcp, ha=ha, resolver=resolver)


__all__ = [
    "GC_PROMOTE_AT",
    "IFNAME_RE",
    "MAC_RE",
    "PORT_MAX",
    "PORT_MIN",
    "SNAPSHOT_FORMAT",
    "CaptivePortalUrl",
    "Device",
    "Dhcp",
    "Ha",
    "Host",
    "Member",
    "Opening",
    "Policy",
    "PortForward",
    "PortRange",
    "PortRule",
    "Protocol",
    "Shaping",
    "ShapingRoot",
    "Snapshot",
    "SnapshotError",
    "gc_paused",
    "port_range",
    "snapshot_from_json",
    "snapshot_to_json",
]
