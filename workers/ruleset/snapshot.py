"""The compiler's input: an immutable, validated snapshot of plain typed values.

Every value that can reach the rule-set text passes through a constructor here: addresses become
`ipaddress` objects of the right family, ports become checked ints, protocols a closed
`StrEnum`, interface names a narrow character set. Free text (descriptions) is kept for the
caller's convenience but is never rendered. A refusal raises `SnapshotError` (a `ValueError`)
whose message names the offending object, e.g. ``port forward #12 of member #3: ...``.

Constructors accept the convenient spellings a selector produces (``"10.100.0.5"``, ``80``,
``(1000, 1010)``, ``"tcp"``) and normalise them; the stored values are always typed and every
tuple is sorted, so equal data gives an equal snapshot regardless of query order.
"""

from __future__ import annotations

import bisect
import contextlib
import enum
import functools
import gc
import ipaddress
import itertools
import json
import operator
import re
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
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


_URL_PATH_RE = re.compile(r"(/[A-Za-z0-9._~!$&'()*+;=:@%-]*)*")
CAPTIVE_URL_MAX = 255  # a DHCPv4 option holds at most 255 bytes


@dataclass(frozen=True, slots=True)
class CaptivePortalUrl:
    """The portal's captive-portal API URL (RFC 8908), as DHCPv4 option 114 carries it (RFC 8910).

    Only ``https://<domain>[:port]/<path>``: RFC 8908 requires TLS with a certificate for the
    name, so no IP literal; no user info, query or fragment; lower-case host; at most 255 bytes.
    Nothing else reaches Kea's text."""

    text: str

    def __post_init__(self) -> None:
        what = "captive portal URL"
        value = self.text
        if type(value) is not str or not value.isascii() or len(value) > CAPTIVE_URL_MAX:
            raise SnapshotError(
                f"{what}: {str(value)[:80]!r} is not an ASCII URL of at most 255 bytes"
            )
        scheme, sep, rest = value.partition("://")
        if scheme != "https" or not sep:
            raise SnapshotError(f"{what}: {value[:80]!r} does not start with https://")
        authority, slash, path = rest.partition("/")
        host, colon, port = authority.partition(":")
        if not _DOMAIN_RE.fullmatch(host) or "." not in host or host.replace(".", "").isdigit():
            raise SnapshotError(f"{what}: {host[:80]!r} is not a domain name in lower case")
        if colon and not (port.isdigit() and 0 < int(port) < 65536 and port[0] != "0"):
            raise SnapshotError(f"{what}: port {port[:10]!r} is not a port number")
        if not _URL_PATH_RE.fullmatch(slash + path) or "," in path:
            raise SnapshotError(
                f"{what}: the path {path[:80]!r} has characters a URL path cannot have"
            )

    @property
    def origin(self) -> str:
        """``https://host[:port]``: where the portal's own pages live too."""
        scheme, _sep, rest = self.text.partition("://")
        return f"{scheme}://{rest.partition('/')[0]}"


@dataclass(frozen=True, slots=True)
class Dhcp:
    """What this host's DHCP server (Kea) hands out on its member interfaces.

    Every device of the site has a reservation MAC -> private IPv4 (both hosts of a pair serve
    the same ones); `pools` are this host's share of the buildings' registration ranges (unknown
    devices only, short leases; each host of a pair gets a disjoint share)."""

    network: IPv4Network
    router: IPv4Address
    dns_servers: tuple[IPv4Address, ...] = ()
    domain: str = ""
    lease_seconds: int = 3600
    registration_lease_seconds: int = 120
    pools: tuple[tuple[IPv4Address, IPv4Address], ...] = ()
    reservations: tuple[tuple[str, IPv4Address], ...] = ()
    control_socket: str = "/run/kea/kea4-ctrl-socket"
    lease_file: str = "/var/lib/kea/kea-leases4.csv"
    interfaces: tuple[str, ...] = ()  # empty: the host's member-side interfaces
    # IPv6: each device's room /64, advertised to that device alone (deploy/firewall/portal-ra).
    ra_prefixes: tuple[tuple[str, IPv6Network], ...] = ()
    ra_pid_file: str = "/run/portal-ra.pid"
    # RFC 8910: leases from the registration pools carry option 114 with this URL.
    captive_portal: CaptivePortalUrl | None = None

    def __post_init__(self) -> None:
        what = "dhcp"
        if self.captive_portal is not None and type(self.captive_portal) is not CaptivePortalUrl:
            raise SnapshotError(
                f"{what} captive portal: {self.captive_portal!r} is no CaptivePortalUrl"
            )
        _set(self, "interfaces", _ifnames(self.interfaces, f"{what} interfaces"))
        _set(self, "ra_pid_file", _path(self.ra_pid_file, f"{what} RA pid file"))
        ra: dict[str, IPv6Network] = {}
        for mac, prefix in self.ra_prefixes:
            mac = _mac(mac, f"{what} RA prefix")
            net = _network(prefix, f"{what} RA prefix of {mac}")
            if net.version != 6 or net.prefixlen != 64:
                raise SnapshotError(f"{what} RA prefix of {mac}: {net} is not an IPv6 /64")
            if ra.setdefault(mac, net) != net:
                raise SnapshotError(f"{what} RA prefix: MAC {mac} is in two rooms")
        _set(self, "ra_prefixes", tuple(sorted(ra.items())))
        net = _network(self.network, f"{what} network")
        if net.version != 4:
            raise SnapshotError(f"{what} network: {net} is not an IPv4 network")
        _set(self, "network", net)
        router = _ipv4(self.router, f"{what} router")
        if router not in net:
            raise SnapshotError(f"{what} router: {router} is outside the member network {net}")
        _set(self, "router", router)
        _set(self, "dns_servers", _ipv4s(self.dns_servers, f"{what} DNS servers"))
        if self.domain and (type(self.domain) is not str or not _DOMAIN_RE.fullmatch(self.domain)):
            raise SnapshotError(f"{what} domain: {self.domain!r} is not a domain name")
        _int(self.lease_seconds, f"{what} lease seconds", 60, LEASE_SECONDS_MAX)
        _int(self.registration_lease_seconds, f"{what} registration lease seconds", 30, 86400)
        _set(self, "control_socket", _path(self.control_socket, f"{what} control socket"))
        _set(self, "lease_file", _path(self.lease_file, f"{what} lease file"))
        pools = []
        for first, last in self.pools:
            a, b = _ipv4(first, f"{what} pool"), _ipv4(last, f"{what} pool")
            if not (a <= b and a in net and b in net):
                raise SnapshotError(f"{what} pool {a}-{b}: not an ascending range inside {net}")
            pools.append((a, b))
        pools.sort()
        for (_a, b), (c, d) in itertools.pairwise(pools):
            if c <= b:
                raise SnapshotError(f"{what} pools {c}-{d} and one before it overlap")
        _set(self, "pools", tuple(pools))
        seen_mac: set[str] = set()
        seen_ip: dict[IPv4Address, str] = {}
        out = []
        for mac, address in self.reservations:
            mac = _mac(mac, f"{what} reservation")
            ip = _ipv4(address, f"{what} reservation of {mac}")
            if ip not in net or ip == router:
                raise SnapshotError(
                    f"{what} reservation {mac} -> {ip}: outside the member network {net} or the router"
                )
            if mac in seen_mac:
                raise SnapshotError(f"{what} reservation: MAC {mac} is reserved twice")
            if ip in seen_ip:
                raise SnapshotError(
                    f"{what} reservation: {ip} is reserved for {seen_ip[ip]} and {mac}"
                )
            i = bisect.bisect_right(pools, (ip, IPv4Address("255.255.255.255"))) - 1
            if i >= 0 and pools[i][0] <= ip <= pools[i][1]:
                raise SnapshotError(f"{what} reservation {mac} -> {ip}: inside a registration pool")
            seen_mac.add(mac)
            seen_ip[ip] = mac
            out.append((mac, ip))
        out.sort()
        _set(self, "reservations", tuple(out))


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


@dataclass(frozen=True, slots=True)
class Ha:
    """The pair's failover for this host: keepalived (VRRP) and conntrackd (state sync).

    One VRRP instance per family, advertised by unicast over the dedicated sync link (members
    cannot forge adverts there), each carrying that family's virtual addresses (gateway on the
    member side, next hop on the upstream side). The instance with the higher priority holds
    the addresses; `preempt_delay` lets a returning host receive the peer's connection states
    before it takes its role back. conntrackd (FT-FW over UDP) runs on the same link."""

    sync_interface: str
    local4: IPv4Address
    peer4: IPv4Address
    priority4: int = 100
    priority6: int = 100
    addresses4: tuple[tuple[str, str], ...] = ()  # (interface, "address/prefix")
    addresses6: tuple[tuple[str, str], ...] = ()
    local6: IPv6Address | None = None  # the IPv6 instance advertises over IPv6
    peer6: IPv6Address | None = None
    vrid: int = 51
    advert_ms: int = 100
    preempt: bool = True
    preempt_delay: int = 2
    track_interfaces: tuple[str, ...] = ()
    ignore_addresses: tuple[str, ...] = ()  # the hosts' own addresses: not synced
    run_dir: str = "/run/portal-ha"
    notify: str = "/usr/local/sbin/portal-ha"
    conntrackd_config: str = "/etc/conntrackd/conntrackd.conf"
    sync_port: int = 3780

    def __post_init__(self) -> None:
        what = "ha"
        _set(self, "sync_interface", _ifnames(self.sync_interface, f"{what} sync link")[0])
        _set(self, "local4", _ipv4(self.local4, f"{what} sync address"))
        _set(self, "peer4", _ipv4(self.peer4, f"{what} peer sync address"))
        if self.local4 == self.peer4:
            raise SnapshotError(f"{what}: the peer's sync address is this host's own")
        for name in ("local6", "peer6"):
            value = getattr(self, name)
            if value is not None:
                _set(self, name, _ipv6(value, f"{what} IPv6 sync address"))
        _int(self.priority4, f"{what} IPv4 priority", 1, 254)
        _int(self.priority6, f"{what} IPv6 priority", 1, 254)
        _int(self.vrid, f"{what} virtual router id", 1, 255)
        _int(self.advert_ms, f"{what} advert interval (ms)", 10, 40950)
        if self.advert_ms % 10:
            raise SnapshotError(f"{what}: the advert interval must be a multiple of 10 ms (VRRPv3)")
        _bool(self.preempt, f"{what} preempt")
        _int(self.preempt_delay, f"{what} preempt delay (s)", 0, 1000)
        _int(self.sync_port, f"{what} sync port", 1024, PORT_MAX)
        for name, family in (("addresses4", 4), ("addresses6", 6)):
            pairs = []
            for ifname, address in getattr(self, name):
                label = f"{what} IPv{family} virtual address"
                pairs.append((_ifnames(ifname, label)[0], _vip(address, label, family)))
            _set(self, name, tuple(sorted(set(pairs))))
        if not self.addresses4 and not self.addresses6:
            raise SnapshotError(f"{what}: no virtual address to fail over")
        if self.addresses6 and (self.local6 is None or self.peer6 is None):
            raise SnapshotError(f"{what}: IPv6 virtual addresses need IPv6 sync addresses")
        if self.local6 is not None and self.local6 == self.peer6:
            raise SnapshotError(f"{what}: the peer's IPv6 sync address is this host's own")
        _set(self, "track_interfaces", _ifnames(self.track_interfaces, f"{what} tracked"))
        try:
            ignore = {ipaddress.ip_address(a) for a in self.ignore_addresses}
        except ValueError as exc:
            raise SnapshotError(f"{what} ignored addresses: {exc}") from None
        ordered = sorted(ignore, key=lambda a: (a.version, a))
        _set(self, "ignore_addresses", tuple(str(a) for a in ordered))
        for name in ("run_dir", "notify", "conntrackd_config"):
            _set(self, name, _path(getattr(self, name), f"{what} {name.replace('_', ' ')}"))


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


@dataclass(frozen=True, slots=True)
class Policy:
    """Global policy: management networks, blocked ports, ICMPv6 echo towards members."""

    management_networks: tuple[IPNetwork, ...] = ()
    blocked_outbound: tuple[PortRule, ...] = (PortRule(Protocol.TCP, PortRange(25, 25)),)
    blocked_inbound: tuple[PortRule, ...] = ()
    inbound_icmpv6_echo: bool = True
    # The walled garden: devices without a reservation lease from these ranges and may reach
    # only the portal (TCP 80/443) and the resolvers (53); everything else is refused at once
    # (TCP reset, ICMP admin-prohibited), counted, so a phone shows its sign-in without waiting.
    registration_networks: tuple[IPv4Network, ...] = ()
    portal_addresses: tuple[IPv4Address, ...] = ()
    dns_servers: tuple[IPv4Address, ...] = ()
    # One of the portal addresses: a walled device's HTTP (TCP 80) to anywhere else is DNATed to
    # port 80 there, where the portal's proxy answers with a redirect to "not registered".
    captive_proxy: IPv4Address | None = None
    # Connection-tracking quotas per member (0: none): what its devices may hold, and what its
    # port forwards and IPv6 openings may receive (a flood aimed at one member cannot fill the
    # table). The key is the member's public IPv4 (after SNAT / before DNAT) or device /64.
    conntrack_quota_out: int = 0
    conntrack_quota_in: int = 0
    # SYN proxy for forwarded TCP ports: the host answers a SYN to a forward itself and
    # connects to the device only once the client completed the handshake (spoofed SYNs create
    # no conntrack entry and never reach the device).
    syn_proxy: bool = False

    def __post_init__(self) -> None:
        _int(self.conntrack_quota_out, "policy conntrack quota (devices)", 0, 10_000_000)
        _int(self.conntrack_quota_in, "policy conntrack quota (forwards)", 0, 10_000_000)
        _set(
            self,
            "management_networks",
            _networks(self.management_networks, "policy management networks"),
        )
        _set(
            self,
            "registration_networks",
            _networks(self.registration_networks, "policy registration networks", 4),
        )
        _set(self, "portal_addresses", _ipv4s(self.portal_addresses, "policy portal addresses"))
        _set(self, "dns_servers", _ipv4s(self.dns_servers, "policy DNS servers"))
        if self.captive_proxy is not None:
            proxy = _ipv4(self.captive_proxy, "policy captive proxy")
            if proxy not in self.portal_addresses:
                raise SnapshotError(
                    f"policy captive proxy: {proxy} is not one of the portal addresses"
                )
            _set(self, "captive_proxy", proxy)
        _set(
            self, "blocked_outbound", _port_rules(self.blocked_outbound, "policy blocked outbound")
        )
        _set(self, "blocked_inbound", _port_rules(self.blocked_inbound, "policy blocked inbound"))
        _bool(self.inbound_icmpv6_echo, "policy inbound_icmpv6_echo")
        _bool(self.syn_proxy, "policy syn_proxy")


@dataclass(frozen=True, slots=True)
class Host:
    """The firewall host this snapshot is compiled for, and its shaping layout."""

    name: str
    uplink_interfaces: tuple[str, ...]
    member_interfaces: tuple[str, ...]
    shaping_root: ShapingRoot = ShapingRoot.HTB
    tx_queues: int = 1
    link_kbit: int = 10_000_000
    private_networks: tuple[IPv4Network, ...] = ()
    public_networks: tuple[IPv4Network, ...] = ()
    # Where the management network arrives (empty: between the member and uplink sides only).
    management_interfaces: tuple[str, ...] = ()
    # The fast path for established flows (the site's setting): a software flowtable on the
    # member and uplink interfaces takes established TCP/UDP flows of unshaped members past
    # the forward and postrouting hooks (docs/ruleset.md, "Fast path"). Needs a kernel with
    # CONFIG_NF_FLOW_TABLE (Debian's has it).
    fast_path: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _HOSTNAME_RE.fullmatch(self.name):
            raise SnapshotError(
                f"host {self.name!r}: name must be 1-64 characters of A-Z a-z 0-9 _ . -"
            )
        what = f"host {self.name}"
        _set(self, "uplink_interfaces", _ifnames(self.uplink_interfaces, f"{what} uplink"))
        _set(self, "member_interfaces", _ifnames(self.member_interfaces, f"{what} member side"))
        _set(
            self,
            "management_interfaces",
            _ifnames(self.management_interfaces, f"{what} management"),
        )
        if set(self.management_interfaces) & {*self.uplink_interfaces, *self.member_interfaces}:
            raise SnapshotError(f"{what}: a management interface is also a data interface")
        if not self.uplink_interfaces or not self.member_interfaces:
            raise SnapshotError(f"{what}: needs at least one uplink and one member interface")
        both = set(self.uplink_interfaces) & set(self.member_interfaces)
        if both:
            raise SnapshotError(
                f"{what}: interface {sorted(both)[0]} is both uplink and member side"
            )
        try:
            _set(self, "shaping_root", ShapingRoot(self.shaping_root))
        except ValueError:
            raise SnapshotError(
                f"{what}: shaping root {self.shaping_root!r} is not htb or mq"
            ) from None
        _int(self.tx_queues, f"{what} tx_queues", 1, MAX_TX_QUEUES)
        if self.shaping_root is ShapingRoot.HTB and self.tx_queues != 1:
            raise SnapshotError(f"{what}: tx_queues > 1 needs shaping_root mq")
        _int(self.link_kbit, f"{what} link_kbit", 1, RATE_MAX_KBIT)
        _set(
            self,
            "private_networks",
            _networks(self.private_networks, f"{what} private networks", 4),
        )
        _set(self, "public_networks", _networks(self.public_networks, f"{what} public networks", 4))
        _bool(self.fast_path, f"{what} fast_path")


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

# Optional parts of a snapshot whose types live in their own modules (the resolver:
# workers.ruleset.unbound registers `Resolver` and its JSON reader on import): name -> (type,
# reader of the stored document). A stored part is written by the object's `to_doc()`.
PARTS: dict[str, tuple[type, Callable[[Any], Any]]] = {}


def _part(name: str, value: Any) -> Any:
    if value is None:
        return None
    kind = PARTS.get(name)
    if kind is None or type(value) is not kind[0]:
        raise SnapshotError(f"snapshot: {name} is not a {kind[0].__name__ if kind else name}")
    return value


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one firewall host needs: policy, host, members (sorted by id), cross-checked."""

    policy: Policy
    host: Host
    members: tuple[Member, ...] = ()
    dhcp: Dhcp | None = None  # None: the host runs no DHCP server
    ha: Ha | None = None  # None: a single host, no failover
    resolver: Any = None  # workers.ruleset.unbound.Resolver; None: the host runs no resolver

    def __post_init__(self) -> None:
        _part("resolver", self.resolver)
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
        # one members tuple, which the compiler recognises (build._LAST_MEMBER_SETS).
        _set(self, "members", members)
        _check_global(self.host, members)

    def to_json(self) -> str:
        """Compact, deterministic JSON of this snapshot (see `snapshot_to_json`)."""
        return snapshot_to_json(self)

    @classmethod
    def from_json(cls, text: str | bytes) -> Snapshot:
        """The snapshot stored by `to_json`, validated again (see `snapshot_from_json`)."""
        return snapshot_from_json(text)


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


class _Owners:
    """Who holds each unique key (member ids, device ids, addresses by integer) in the members
    checked so far, for one pair of host networks."""

    def __init__(self, host: Host) -> None:
        self.networks = (host.private_networks, host.public_networks)
        self.private = _spans(host.private_networks) if host.private_networks else None
        self.public = _spans(host.public_networks) if host.public_networks else None
        self.by_id: dict[int, Member] = {}
        self.device: dict[int, int] = {}
        self.public_ip: dict[int, int] = {}
        self.v4: dict[int, int] = {}
        self.v6: dict[int, int] = {}

    def add(self, m: Member) -> None:
        """Check `m` against everyone added so far and take its keys (raises SnapshotError)."""
        if not isinstance(m, Member):
            raise SnapshotError(f"snapshot: {m!r} is not a Member")
        mid = m.id
        if mid in self.by_id:
            raise SnapshotError(f"member #{mid} appears twice")
        self.by_id[mid] = m
        pub = m.public_ipv4
        if pub is not None:
            key = pub._ip  # type: ignore[attr-defined]
            other = self.public_ip.setdefault(key, mid)
            if other != mid:
                raise SnapshotError(f"member #{mid}: public_ipv4 {pub} is also member #{other}'s")
            if self.public and not _inside(key, self.public):
                raise SnapshotError(
                    f"member #{mid}: public_ipv4 {pub} is outside the host's public networks"
                )
            if key in self.v4:
                self._clash(key)
        for d in m.devices:
            did = d.id
            owner = self.device.setdefault(did, mid)
            if owner != mid:
                raise SnapshotError(f"device #{did} belongs to member #{owner} and member #{mid}")
            a4 = d.ipv4
            if a4 is not None:
                key = a4._ip  # type: ignore[attr-defined]
                other = self.v4.setdefault(key, did)
                if other != did:
                    raise SnapshotError(
                        f"device #{did} of member #{mid}: ipv4 {a4} is also device #{other}'s"
                    )
                if self.private and not _inside(key, self.private):
                    raise SnapshotError(
                        f"device #{did} of member #{mid}: ipv4 {a4} is outside the host's private networks"
                    )
                if key in self.public_ip:
                    self._clash(key)
            for a6 in d.ipv6:
                other = self.v6.setdefault(a6._ip, did)  # type: ignore[attr-defined]
                if other != did:
                    raise SnapshotError(
                        f"device #{did} of member #{mid}: ipv6 {a6} is also device #{other}'s"
                    )

    def _clash(self, key: int) -> None:
        raise SnapshotError(
            f"device #{self.v4[key]}: ipv4 {IPv4Address(key)} is also the public_ipv4 of member "
            f"#{self.public_ip[key]}"
        )

    def remove(self, m: Member) -> None:
        """Give back the keys of `m` (a member checked before, now changed or gone)."""
        del self.by_id[m.id]
        if m.public_ipv4 is not None:
            self.public_ip.pop(m.public_ipv4._ip, None)  # type: ignore[attr-defined]
        for d in m.devices:
            self.device.pop(d.id, None)
            if d.ipv4 is not None:
                self.v4.pop(d.ipv4._ip, None)  # type: ignore[attr-defined]
            for a6 in d.ipv6:
                self.v6.pop(a6._ip, None)  # type: ignore[attr-defined]


# The owners after the last check per pair of host networks (the hosts of a site share one):
# the worker's next snapshot differs in a few members, so only those are checked again. A
# failed check forgets its entry (the next one starts from nothing).
_OWNERS: dict[tuple[Any, Any], _Owners] = {}
_OWNERS_LOCK = threading.Lock()
_OWNERS_KEPT = 8


def _check_global(host: Host, members: tuple[Member, ...]) -> None:
    """Uniqueness across members; addresses inside the host's networks when those are given.

    Keyed by the addresses' integers (`_ip`): an ipaddress object hashes through Python code
    (hash(hex(int))), which made this check most of a steady-state compile at 100,000 members.
    Incremental: members that are the very objects of the last check with the same networks
    (the worker reuses unchanged members) are not checked again.
    """
    networks = (host.private_networks, host.public_networks)
    with _OWNERS_LOCK:
        owners = _OWNERS.pop(networks, None)
        if owners is None:
            owners = _Owners(host)
            changed: list[Member] = list(members)
        else:
            ids = {m.id for m in members}
            if len(ids) != len(members):
                owners = _Owners(host)  # a duplicate: the full check names it
                changed = list(members)
            else:
                by_id = owners.by_id
                changed = [m for m in members if by_id.get(m.id) is not m]
                for old in [by_id[m.id] for m in changed if m.id in by_id]:
                    owners.remove(old)
                for gone in [m for mid, m in by_id.items() if mid not in ids]:
                    owners.remove(gone)
        # Give back the keys of every changed member first: a device may move between two
        # changed members, or an address from one to the other, in the same snapshot.
        for m in changed:
            owners.add(m)  # raises: the entry stays forgotten
        _OWNERS[networks] = owners
        while len(_OWNERS) > _OWNERS_KEPT:
            _OWNERS.pop(next(iter(_OWNERS)))


# ------------------------------------------------------------------------------- serialisation

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


# member id -> (member, its JSON row) of the last `snapshot_to_json`: a worker stores a snapshot
# per version while few members change, and the snapshot reader hands over the same Member
# objects for unchanged members, so their rows are reused (identity check). Bounded: only the
# members of the last call.
_MEMBER_JSON: dict[int, tuple[Member, str]] = {}


def snapshot_to_json(snapshot: Snapshot) -> str:
    """Compact, deterministic JSON: equal snapshots give identical text (ASCII, no spaces).

    Members are rows of positional fields with trailing defaults dropped. Descriptions are not
    stored (they never reach the rule set and do not take part in equality). The text is what
    ``json.dumps(doc, separators=(",", ":"), sort_keys=True)`` gives for the whole document; the
    member rows are dumped one by one so that unchanged members' rows can be reused.
    """
    global _MEMBER_JSON
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
    cache, fresh, rows = _MEMBER_JSON, {}, []
    for m in snapshot.members:
        hit = cache.get(m.id)
        if hit is None or hit[0] is not m:
            hit = (m, dump(_member_out(m)))
        fresh[m.id] = hit
        rows.append(hit[1])
    _MEMBER_JSON = fresh
    # "dhcp" sorts before every other key of the head, as the dump needs.
    dhcp = _dhcp_json(snapshot.dhcp, dump)
    return f'{{"dhcp":{dhcp},{dump(head)[1:-1]},"members":[{",".join(rows)}],{dump(tail)[1:]}'


# The JSON of the last few `Dhcp` objects dumped, by identity (the worker reuses one object while
# no reservation changes; its 60,000 rows need not be dumped again).
_DHCP_JSON: dict[int, tuple[Dhcp, str]] = {}


def _dhcp_json(d: Dhcp | None, dump: Callable[[Any], str]) -> str:
    hit = _DHCP_JSON.get(id(d))
    if hit is not None and hit[0] is d:
        return hit[1]
    text = dump(_dhcp_out(d))
    if d is not None:
        while len(_DHCP_JSON) >= 8:
            _DHCP_JSON.pop(next(iter(_DHCP_JSON)))
        _DHCP_JSON[id(d)] = (d, text)
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
        resolver = PARTS["resolver"][1](doc["resolver"]) if doc.get("resolver") else None
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, SnapshotError):
            raise
        raise SnapshotError(f"snapshot json: {type(exc).__name__}: {exc}") from None
    return Snapshot(policy=policy, host=host, members=members, dhcp=dhcp, ha=ha, resolver=resolver)
