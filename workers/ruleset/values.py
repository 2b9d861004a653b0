"""The compiler's value checks: every plain value a snapshot holds passes through here.

Addresses become `ipaddress` objects of the right family, ports checked ints and `PortRange`s,
protocols a closed `StrEnum`, interface names a narrow character set; a refusal raises
`SnapshotError` naming the offending object. The objects built from these values live in
`host` (policy, host, DHCP, failover), `member` (members and their devices, forwards and
openings) and `snapshot` (the whole snapshot and its stored form).
"""

from __future__ import annotations

import bisect
import contextlib
import enum
import functools
import gc
import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

IPv4Address = ipaddress.IPv4Address
IPv6Address = ipaddress.IPv6Address
IPv4Network = ipaddress.IPv4Network
IPv6Network = ipaddress.IPv6Network
IPNetwork = IPv4Network | IPv6Network

PORT_MIN = 1
PORT_MAX = 65535
RATE_MAX_KBIT = 400_000_000  # 400 Gbit/s: anything above is a unit mistake
MAX_TX_QUEUES = 64
IFNAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,15}")  # an interface name the compiler accepts
_HOSTNAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class SnapshotError(ValueError):
    """The snapshot is refused; the message names the offending object."""


class Protocol(enum.StrEnum):
    """Transport protocol of a forward, an opening or a blocked port."""

    TCP = "tcp"
    UDP = "udp"
    BOTH = "both"

    @property
    def l4(self) -> tuple[str, ...]:
        """The nft protocol names this stands for, sorted."""
        return _L4[self]


_L4: dict[str, tuple[str, ...]] = {"tcp": ("tcp",), "udp": ("udp",), "both": ("tcp", "udp")}
_PROTOCOLS: dict[str, Protocol] = {p.value: p for p in Protocol}  # 10x faster than Protocol(v)


class ShapingRoot(enum.StrEnum):
    """Root qdisc layout of a shaping interface (see docs/ruleset.md)."""

    HTB = "htb"  # one HTB under the root: exact, one qdisc lock
    MQ = "mq"  # mq root, one HTB per hardware tx queue: scales over cores


GC_PROMOTE_AT = 50_000  # objects made during a pause: promoted without a walk from here on


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while hundreds of thousands of acyclic objects are made
    (snapshot values, elements): each collection would walk all of them again (it cost 40% of
    a 20,000-member read and a third of a compile from nothing).

    When the pause made many objects (a read or compile from nothing), they are moved to the
    oldest generation on the way out without being walked (`gc.freeze()` + `gc.unfreeze()`:
    two list splices), so re-enabling the collector does not start with one collection over
    all of them (a pause alone only defers that walk). They stay collectable: they meet the
    next full collection like any long-lived object. A small pause (one member changed) leaves
    the generations as they are; so does a process that froze objects on purpose (a pre-fork
    server): those must stay frozen."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_count()[0] >= GC_PROMOTE_AT and not gc.get_freeze_count():
            gc.freeze()
            gc.unfreeze()
        if was_enabled:
            gc.enable()


# --------------------------------------------------------------------------- coercion helpers


def _int(value: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotError(f"{what}: {value!r} is not an integer")
    if not lo <= value <= hi:
        raise SnapshotError(f"{what}: {value} is outside {lo}..{hi}")
    return value


def _id(value: Any, what: str) -> int:
    return _int(value, f"{what} id", 1, 2**63 - 1)


_AF4, _AF6 = socket.AF_INET, socket.AF_INET6
_pton = socket.inet_pton
_ntop = socket.inet_ntop


def text4(address: IPv4Address) -> str:
    """Dotted quad at C speed (str() is a Python-level call); `_ip` is the address's int."""
    return _ntop(_AF4, address._ip.to_bytes(4, "big"))  # type: ignore[attr-defined]


def text6(address: IPv6Address) -> str:
    """RFC 5952 text at C speed (7x faster than str())."""
    return _ntop(_AF6, address._ip.to_bytes(16, "big"))  # type: ignore[attr-defined]


_new = object.__new__
_from_bytes = int.from_bytes


_Address = TypeVar("_Address", IPv4Address, IPv6Address)


def _parse_address(family: int, cls: type[_Address], value: Any) -> _Address | None:
    """The usual address text as an address of `cls` at C speed, or None (then `_ipv4` or
    `_ipv6` says what is wrong). inet_pton is strict (no leading zeros, no mask, no "%zone"),
    so what it accepts is what `cls(text)` would give; the object gets its integer directly,
    which is all that the ipaddress constructors do with an int."""
    if type(value) is not str:
        return None
    try:
        n = _from_bytes(_pton(family, value), "big")
    except OSError:
        return None
    address = _new(cls)
    address._ip = n  # type: ignore[attr-defined]
    if family == _AF6:
        address._scope_id = None  # type: ignore[attr-defined]
    return address


_parse4 = functools.partial(_parse_address, _AF4, IPv4Address)
_parse6 = functools.partial(_parse_address, _AF6, IPv6Address)


def _ipv4(value: Any, what: str) -> IPv4Address:
    if type(value) is IPv4Address:
        return value
    parsed = _parse4(value)
    if parsed is not None:
        return parsed
    try:
        addr = ipaddress.ip_address(value)
    except (ValueError, TypeError) as exc:
        raise SnapshotError(f"{what}: {value!r} is not an IP address") from exc
    if not isinstance(addr, IPv4Address):
        raise SnapshotError(f"{what}: {value!r} is not an IPv4 address (address family mismatch)")
    return addr


def _ipv6(value: Any, what: str) -> IPv6Address:
    if type(value) is IPv6Address:
        return value
    parsed = _parse6(value)
    if parsed is not None:
        return parsed
    try:
        addr = ipaddress.ip_address(value)
    except (ValueError, TypeError) as exc:
        raise SnapshotError(f"{what}: {value!r} is not an IP address") from exc
    if not isinstance(addr, IPv6Address):
        raise SnapshotError(f"{what}: {value!r} is not an IPv6 address (address family mismatch)")
    if addr.scope_id:
        raise SnapshotError(f"{what}: {value!r} has a scope id (link-local zone)")
    return addr


def _parse_network(value: str) -> IPNetwork | None:
    """Fast path for the usual "address/length" text, or None (then ipaddress explains)."""
    address, slash, length = value.partition("/")
    if not slash or not length.isdigit() or len(length) > 3:
        return None
    family, bits, cls = (_AF6, 128, IPv6Network) if ":" in address else (_AF4, 32, IPv4Network)
    try:
        n = int.from_bytes(_pton(family, address), "big")
    except OSError:
        return None  # ipaddress explains what is wrong
    plen = int(length)
    if plen > bits or n & ((1 << (bits - plen)) - 1):
        return None
    return cls((n, plen))


# Networks named by many values (subnets, pools, management networks) are parsed once.
_network_text = functools.lru_cache(maxsize=8192)(_parse_network)


def _network(value: Any, what: str) -> IPNetwork:
    if isinstance(value, IPv4Network | IPv6Network):
        return value
    if type(value) is str:
        net = _network_text(value)
        if net is not None:
            return net
    try:
        return ipaddress.ip_network(value)  # strict: host bits must be zero
    except (ValueError, TypeError) as exc:
        raise SnapshotError(f"{what}: {value!r} is not a network ({exc})") from exc


def _networks(values: Iterable[Any], what: str, family: int | None = None) -> tuple[IPNetwork, ...]:
    if isinstance(values, str | bytes):
        raise SnapshotError(f"{what}: expected a list of networks, got a string")
    if type(values) is tuple and len(values) == 1:  # the usual single prefix: nothing to sort
        net = _network(values[0], what)
        if family is not None and net.version != family:
            raise SnapshotError(
                f"{what}: {net} is not an IPv{family} network (address family mismatch)"
            )
        return (net,)
    nets = []
    for v in values:
        net = _network(v, what)
        if family is not None and net.version != family:
            raise SnapshotError(
                f"{what}: {net} is not an IPv{family} network (address family mismatch)"
            )
        nets.append(net)
    return tuple(sorted(set(nets), key=lambda n: (n.version, n.network_address, n.prefixlen)))


def _ifnames(values: Iterable[Any], what: str) -> tuple[str, ...]:
    if isinstance(values, str):
        values = (values,)
    names = []
    for v in values:
        if not isinstance(v, str) or not IFNAME_RE.fullmatch(v):
            raise SnapshotError(
                f"{what}: interface name {v!r} must be 1-15 characters of A-Z a-z 0-9 _ . -"
            )
        names.append(v)
    return tuple(sorted(set(names)))


def _protocol(value: Any, what: str) -> Protocol:
    proto = _PROTOCOLS.get(value) if type(value) is str else None
    if proto is not None:
        return proto
    try:
        return Protocol(value)
    except ValueError as exc:
        raise SnapshotError(f"{what}: protocol {value!r} is not one of tcp, udp, both") from exc


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise SnapshotError(f"{what}: {value!r} is not a boolean")
    return value


def _ipv4s(values: Iterable[Any], what: str) -> tuple[IPv4Address, ...]:
    if isinstance(values, str | bytes):
        raise SnapshotError(f"{what}: expected a list of addresses, got a string")
    return tuple(sorted({_ipv4(v, what) for v in values}))


MAC_RE = re.compile(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}")
_DOMAIN_RE = re.compile(
    r"(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
)
_PATH_RE = re.compile(r"/[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*")
LEASE_SECONDS_MAX = 7 * 86400


def _mac(value: Any, what: str) -> str:
    if type(value) is not str or not MAC_RE.fullmatch(value):
        raise SnapshotError(f"{what}: MAC {value!r} is not six lower-case hex pairs joined by ':'")
    return value


def _path(value: Any, what: str) -> str:
    if (
        type(value) is not str
        or len(value) > 100
        or not _PATH_RE.fullmatch(value)
        or "/../" in value
    ):
        raise SnapshotError(
            f"{what}: {value!r} is not an absolute path of at most 100 safe characters"
        )
    return value


# Sets a field of a frozen dataclass in its __post_init__ (object.__setattr__ itself: no Python
# frame per call, and the snapshot reader makes hundreds of thousands of values).
_set: Callable[[object, str, Any], None] = object.__setattr__


def _vip(value: Any, what: str, family: int) -> str:
    """A virtual address with its prefix length ("10.100.0.1/16"), as canonical text."""
    if type(value) is not str or "/" not in value:
        raise SnapshotError(f"{what}: {value!r} needs an address and its prefix length")
    try:
        iface = ipaddress.ip_interface(value)
    except ValueError as exc:
        raise SnapshotError(f"{what}: {value!r} is not an address/prefix") from exc
    if iface.version != family:
        raise SnapshotError(f"{what}: {value} is not IPv{family} (address family mismatch)")
    return str(iface)


# --------------------------------------------------------------------------------- value types


@dataclass(frozen=True, slots=True, order=True)
class PortRange:
    """An inclusive port range 1..65535; a single port is a range of length 1."""

    first: int
    last: int

    def __post_init__(self) -> None:
        a, b = self.first, self.last
        if type(a) is not int or type(b) is not int or not 0 < a <= b <= PORT_MAX:
            _int(a, "port", PORT_MIN, PORT_MAX)
            _int(b, "port", PORT_MIN, PORT_MAX)
            raise SnapshotError(f"port range {self.first}-{self.last}: first port after last")

    @classmethod
    def of(cls, value: Any, what: str = "port range") -> PortRange:
        """Coerce 80, (1000, 1010), "1000-1010" or a PortRange; errors name `what`."""
        if type(value) is PortRange:
            return value
        try:
            if type(value) is int:
                return _single_port(value)
            if isinstance(value, tuple | list) and len(value) == 2:
                a, b = value
                if type(a) is int and type(b) is int:
                    return _single_port(a) if a == b else _port_range(a, b)
                return cls(a, b)
            if isinstance(value, str) and re.fullmatch(r"\d{1,5}(-\d{1,5})?", value):
                a, _, b = value.partition("-")
                return cls(int(a), int(b or a))
        except SnapshotError as exc:
            raise SnapshotError(f"{what}: {exc}") from None
        raise SnapshotError(f"{what}: {value!r} is not a port or port range")

    @property
    def size(self) -> int:
        """Number of ports in the range."""
        return self.last - self.first + 1

    def overlaps(self, other: PortRange) -> bool:
        """True when the two ranges share at least one port."""
        return self.first <= other.last and other.first <= self.last

    def __str__(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"


@functools.lru_cache(maxsize=65536)
def _single_port(port: int) -> PortRange:
    """Single-port ranges are shared: a snapshot holds hundreds of thousands of them."""
    return PortRange(port, port)


@functools.lru_cache(maxsize=65536)
def _port_range(first: int, last: int) -> PortRange:
    return PortRange(first, last)


def port_range(first: Any, last: Any, what: str = "port range") -> PortRange:
    """The shared PortRange first..last (validated once per distinct pair); errors name `what`."""
    if type(first) is int and type(last) is int:
        try:
            return _single_port(first) if first == last else _port_range(first, last)
        except SnapshotError as exc:
            raise SnapshotError(f"{what}: {exc}") from None
    return PortRange.of((first, last), what)


@dataclass(frozen=True, slots=True)
class PortRule:
    """A protocol and port range, used for blocked inbound and outbound ports."""

    protocol: Protocol
    ports: PortRange

    def __post_init__(self) -> None:
        _set(self, "protocol", _protocol(self.protocol, "port rule"))
        _set(self, "ports", PortRange.of(self.ports, "port rule"))


def _port_rules(values: Iterable[Any], what: str) -> tuple[PortRule, ...]:
    rules = []
    for v in values:
        if isinstance(v, PortRule):
            rules.append(v)
        elif isinstance(v, tuple | list) and len(v) == 2:
            try:
                rules.append(PortRule(v[0], v[1]))
            except SnapshotError as exc:
                raise SnapshotError(f"{what}: {exc}") from None
        else:
            raise SnapshotError(f"{what}: {v!r} is not a (protocol, ports) pair")
    return tuple(sorted(set(rules), key=lambda r: (r.protocol.value, r.ports)))


def _spans(networks: Iterable[IPNetwork]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Networks as sorted, merged integer intervals (starts, ends) for `_inside`."""
    merged: list[list[int]] = []
    bounds = []
    for n in networks:
        start = n.network_address._ip  # type: ignore[union-attr]
        bounds.append((start, start | ((1 << (n.max_prefixlen - n.prefixlen)) - 1)))
    for start, end in sorted(bounds):
        if merged and start <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return tuple(a for a, _ in merged), tuple(b for _, b in merged)


def _inside(value: int, spans: tuple[tuple[int, ...], tuple[int, ...]]) -> bool:
    """True when the integer address lies in one of the intervals (a bisection, not a scan)."""
    starts, ends = spans
    i = bisect.bisect_right(starts, value) - 1
    return i >= 0 and value <= ends[i]
