"""A member as the compiler sees it: shaping, devices, port forwards and IPv6 openings."""

from __future__ import annotations

import ipaddress
import itertools
import operator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from workers.ruleset.values import (
    _L4,
    _PROTOCOLS,
    RATE_MAX_KBIT,
    PortRange,
    Protocol,
    SnapshotError,
    _bool,
    _id,
    _inside,
    _int,
    _ipv4,
    _ipv6,
    _networks,
    _parse4,
    _parse6,
    _parse_network,
    _protocol,
    _set,
    _spans,
)

IPv4Address = ipaddress.IPv4Address
IPv6Address = ipaddress.IPv6Address
IPv4Network = ipaddress.IPv4Network
IPv6Network = ipaddress.IPv6Network
IPNetwork = IPv4Network | IPv6Network


@dataclass(frozen=True, slots=True)
class Shaping:
    """A member's shaped rates in kbit/s (test access or shaping profile)."""

    down_kbit: int
    up_kbit: int

    def __post_init__(self) -> None:
        _int(self.down_kbit, "shaping down_kbit", 8, RATE_MAX_KBIT)
        _int(self.up_kbit, "shaping up_kbit", 8, RATE_MAX_KBIT)


@dataclass(frozen=True, slots=True)
class Device:
    """A member's device: one private IPv4 (or none) and its IPv6 addresses."""

    id: int
    ipv4: IPv4Address | None = None
    ipv6: tuple[IPv6Address, ...] = ()

    def __post_init__(self) -> None:
        if type(self.id) is not int or self.id < 1:
            _id(self.id, "device")
        a4 = self.ipv4
        if a4 is not None and type(a4) is not IPv4Address:
            parsed = _parse4(a4)  # the message only when it is needed
            _set(self, "ipv4", parsed or _ipv4(a4, f"device #{self.id} ipv4"))
        v6 = self.ipv6
        if type(v6) is tuple and len(v6) == 1:
            a6 = v6[0]
            if type(a6) is not IPv6Address:  # the common case: one address
                parsed6 = _parse6(a6)
                _set(self, "ipv6", (parsed6 or _ipv6(a6, f"device #{self.id} ipv6"),))
            return
        if not v6:
            if type(v6) is not tuple:
                _set(self, "ipv6", ())
            return
        if isinstance(v6, str | IPv6Address):
            v6 = (v6,)
        _set(self, "ipv6", tuple(sorted({_ipv6(a, f"device #{self.id} ipv6") for a in v6})))


@dataclass(frozen=True, slots=True)
class PortForward:
    """Destination NAT of public ports of the member's IPv4 to ports of one device."""

    id: int
    protocol: Protocol
    public_ports: PortRange
    device_id: int
    target_ports: PortRange
    enabled: bool = True
    description: str = field(default="", compare=False)  # never rendered

    def __post_init__(self) -> None:
        what = "port forward"
        if type(self.id) is not int or self.id < 1:
            _id(self.id, what)
        proto = self.protocol
        if type(proto) is not Protocol:
            known = _PROTOCOLS.get(proto) if type(proto) is str else None
            _set(self, "protocol", known or _protocol(proto, f"{what} #{self.id}"))
        pp, tp = self.public_ports, self.target_ports
        if type(pp) is not PortRange:
            pp = PortRange.of(pp, f"{what} #{self.id} public ports")
            _set(self, "public_ports", pp)
        if type(tp) is not PortRange:
            tp = PortRange.of(tp, f"{what} #{self.id} target ports")
            _set(self, "target_ports", tp)
        if type(self.device_id) is not int or self.device_id < 1:
            _id(self.device_id, f"{what} #{self.id} target device")
        if type(self.enabled) is not bool:
            _bool(self.enabled, f"{what} #{self.id} enabled")
        if type(self.description) is not str:
            raise SnapshotError(f"{what} #{self.id}: description is not a string")
        if pp.last - pp.first != tp.last - tp.first:
            what = f"port forward #{self.id}"
            raise SnapshotError(
                f"{what}: public ports {self.public_ports} and target ports "
                f"{self.target_ports} have unequal lengths"
            )


@dataclass(frozen=True, slots=True)
class Opening:
    """An inbound IPv6 opening for all addresses of one device; ports None means all ports."""

    id: int
    device_id: int
    protocol: Protocol = Protocol.BOTH
    ports: PortRange | None = None
    description: str = field(default="", compare=False)  # never rendered

    def __post_init__(self) -> None:
        if type(self.id) is not int or self.id < 1:
            _id(self.id, "IPv6 opening")
        what = f"IPv6 opening #{self.id}"
        _id(self.device_id, f"{what} device")
        proto = self.protocol
        if type(proto) is not Protocol:
            known = _PROTOCOLS.get(proto) if type(proto) is str else None
            _set(self, "protocol", known or _protocol(proto, what))
        if self.ports is not None and type(self.ports) is not PortRange:
            _set(self, "ports", PortRange.of(self.ports, f"{what} ports"))
        if not isinstance(self.description, str):
            raise SnapshotError(f"{what}: description is not a string")


@dataclass(frozen=True, slots=True)
class Member:
    """An active member: public IPv4, IPv6 prefixes, devices, forwards, openings, shaping."""

    id: int
    public_ipv4: IPv4Address | None = None
    devices: tuple[Device, ...] = ()
    forwards: tuple[PortForward, ...] = ()
    openings: tuple[Opening, ...] = ()
    shaping: Shaping | None = None
    ipv6_prefixes: tuple[IPv6Network, ...] = ()  # when given, device IPv6 must lie inside

    def __post_init__(self) -> None:
        if type(self.id) is not int or self.id < 1:
            _id(self.id, "member")
        pub = self.public_ipv4
        if pub is not None and type(pub) is not IPv4Address:
            parsed = _parse4(pub)  # the message only when it is needed
            _set(self, "public_ipv4", parsed or _ipv4(pub, f"member #{self.id} public_ipv4"))
        if self.shaping is not None and type(self.shaping) is not Shaping:
            raise SnapshotError(f"member #{self.id}: shaping is not a Shaping")
        prefixes = self.ipv6_prefixes
        if prefixes:
            net = _room_prefix(prefixes)
            _set(
                self,
                "ipv6_prefixes",
                (net,)
                if net is not None
                else _networks(prefixes, f"member #{self.id} ipv6 prefixes", 6),
            )
        devices = _canonical(self, "devices", Device, "device")
        forwards = _canonical(self, "forwards", PortForward, "port forward")
        openings = _canonical(self, "openings", Opening, "IPv6 opening")
        by_id = {d.id: d for d in devices}
        prefixes = self.ipv6_prefixes
        if len(prefixes) == 1:  # the usual case: one room prefix, compare the network bits
            shift = 128 - prefixes[0].prefixlen
            top = prefixes[0].network_address._ip >> shift  # type: ignore[attr-defined]
            for d in devices:
                for a in d.ipv6:
                    if a._ip >> shift != top:  # type: ignore[attr-defined]
                        _outside_prefixes(self.id, d.id, a)
        elif prefixes:
            spans = _spans(prefixes)
            for d in devices:
                for a in d.ipv6:
                    if not _inside(a._ip, spans):  # type: ignore[attr-defined]
                        _outside_prefixes(self.id, d.id, a)
        enabled = 0
        for f in forwards:
            dev = by_id.get(f.device_id)
            if dev is None:
                raise SnapshotError(
                    f"port forward #{f.id} of member #{self.id}: device #{f.device_id} is not the member's"
                )
            if f.enabled:
                enabled += 1
                if dev.ipv4 is None:
                    raise SnapshotError(
                        f"port forward #{f.id} of member #{self.id}: device #{dev.id} has no IPv4"
                    )
        if enabled and self.public_ipv4 is None:
            raise SnapshotError(f"member #{self.id}: has enabled port forwards but no public IPv4")
        for o in openings:
            if o.device_id not in by_id:
                raise SnapshotError(
                    f"IPv6 opening #{o.id} of member #{self.id}: device #{o.device_id} is not the member's"
                )
        if enabled > 1:
            _check_forward_overlap(self.id, forwards)


def _room_prefix(prefixes: Any) -> IPv6Network | None:
    """The usual member's prefixes, one room /64 as text, as its IPv6Network; None otherwise
    (then `_networks` checks and explains). Not through `_network_text`'s cache: every member
    has a room of its own, so it would only evict the shared networks."""
    if type(prefixes) is tuple and len(prefixes) == 1 and type(prefixes[0]) is str:
        net = _parse_network(prefixes[0])
        if type(net) is IPv6Network:
            return net
    return None


def _outside_prefixes(member_id: int, device_id: int, address: IPv6Address) -> None:
    raise SnapshotError(
        f"device #{device_id} of member #{member_id}: ipv6 {address} is outside the member's prefixes"
    )


_Item = TypeVar("_Item", "Device", "PortForward", "Opening")


def _canonical(member: Member, name: str, cls: type[_Item], noun: str) -> tuple[_Item, ...]:
    """The member's `name` tuple checked for type and duplicate ids, sorted by id."""
    items: tuple[_Item, ...] = getattr(member, name)
    if type(items) is not tuple:
        if not isinstance(items, list | tuple):
            raise SnapshotError(f"member #{member.id}: {noun}s must be a tuple")
        items = tuple(items)
    last = 0
    ordered = True
    for item in items:
        if type(item) is not cls:
            raise SnapshotError(f"member #{member.id}: {item!r} is not a {cls.__name__}")
        if item.id <= last:
            ordered = False
        last = item.id
    if not ordered:
        items = tuple(sorted(items, key=lambda i: i.id))
        for a, b in itertools.pairwise(items):
            if a.id == b.id:
                raise SnapshotError(f"member #{member.id}: {noun} #{a.id} appears twice")
    if items is not getattr(member, name):
        _set(member, name, items)
    return items


def _check_forward_overlap(member_id: int, forwards: tuple[PortForward, ...]) -> None:
    """No two enabled forwards may share a public port of the same protocol."""
    spans = []
    for f in forwards:
        if f.enabled:
            pp = f.public_ports
            for p in _L4[f.protocol]:
                spans.append((p, pp.first, pp.last, f.id))
    spans.sort()
    for (pa, _, alast, aid), (pb, bfirst, blast, bid) in itertools.pairwise(spans):
        if pa == pb and bfirst <= alast:
            b = PortRange(bfirst, blast)
            raise SnapshotError(
                f"port forward #{bid} of member #{member_id}: public {pb} ports {b} overlap port forward #{aid}"
            )


_by_id = operator.attrgetter("id")  # a sort key compared in C
