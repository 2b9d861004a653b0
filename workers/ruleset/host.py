"""What a snapshot says about the host and the site: policy, the host, DHCP, failover."""

from __future__ import annotations

import bisect
import ipaddress
import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from workers.ruleset.values import (
    _DOMAIN_RE,
    _HOSTNAME_RE,
    LEASE_SECONDS_MAX,
    MAX_TX_QUEUES,
    PORT_MAX,
    RATE_MAX_KBIT,
    PortRange,
    PortRule,
    Protocol,
    ShapingRoot,
    SnapshotError,
    _bool,
    _ifnames,
    _int,
    _ipv4,
    _ipv4s,
    _ipv6,
    _mac,
    _network,
    _networks,
    _path,
    _port_rules,
    _set,
    _vip,
)

IPv4Address = ipaddress.IPv4Address
IPv6Address = ipaddress.IPv6Address
IPv4Network = ipaddress.IPv4Network
IPv6Network = ipaddress.IPv6Network
IPNetwork = IPv4Network | IPv6Network

_URL_PATH_RE = re.compile(r"(/[A-Za-z0-9._~!$&'()*+;=:@%-]*)*")
CAPTIVE_URL_MAX = 255  # a DHCPv4 option holds at most 255 bytes
RATELIMIT_MAX = 1_000_000  # the resolver's queries per second per client
_USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


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

    def with_devices(
        self,
        *,
        removed: Iterable[tuple[str, Any]] = (),
        added: Iterable[tuple[str, Any]] = (),
        ra_removed: Iterable[tuple[str, Any]] = (),
        ra_added: Iterable[tuple[str, Any]] = (),
    ) -> Dhcp:
        """This input with some reservations and RA prefixes taken out and others put in (a
        few devices changed): equal to `Dhcp` built in full from the resulting rows, but only
        the new rows are parsed and checked (a full build checks 60,000 at 20,000 members, about
        a second). `removed` / `ra_removed` must be rows this object holds. Raises
        SnapshotError on any problem, after which the caller builds in full (whose message
        names the row)."""
        what = "dhcp"
        rows = list(self.reservations)
        for mac, address in removed:
            ip = _ipv4(address, f"{what} reservation of {mac}")
            i = bisect.bisect_left(rows, (mac,))
            if i == len(rows) or rows[i] != (mac, ip):
                raise SnapshotError(f"{what}: reservation {mac} -> {ip} is not in the input")
            del rows[i]
        news = list(added)
        if news:
            taken = {int(ip) for _mac_, ip in rows}
            router, net, pools = self.router, self.network, self.pools
            for mac, address in news:
                mac = _mac(mac, f"{what} reservation")
                ip = _ipv4(address, f"{what} reservation of {mac}")
                if ip not in net or ip == router:
                    raise SnapshotError(f"{what} reservation {mac} -> {ip}: outside {net}")
                i = bisect.bisect_left(rows, (mac,))
                if i < len(rows) and rows[i][0] == mac:
                    raise SnapshotError(f"{what} reservation: MAC {mac} is reserved twice")
                if int(ip) in taken:
                    raise SnapshotError(f"{what} reservation: {ip} is reserved twice")
                j = bisect.bisect_right(pools, (ip, IPv4Address("255.255.255.255"))) - 1
                if j >= 0 and pools[j][0] <= ip <= pools[j][1]:
                    raise SnapshotError(f"{what} reservation {mac} -> {ip}: inside a pool")
                taken.add(int(ip))
                rows.insert(i, (mac, ip))
        ra = list(self.ra_prefixes)
        for mac, prefix in ra_removed:
            net6 = _network(prefix, f"{what} RA prefix of {mac}")
            i = bisect.bisect_left(ra, (mac,))
            if i == len(ra) or ra[i] != (mac, net6):
                raise SnapshotError(f"{what}: RA prefix {mac} -> {net6} is not in the input")
            del ra[i]
        for mac, prefix in ra_added:
            mac = _mac(mac, f"{what} RA prefix")
            net6 = _network(prefix, f"{what} RA prefix of {mac}")
            if net6.version != 6 or net6.prefixlen != 64:
                raise SnapshotError(f"{what} RA prefix of {mac}: {net6} is not an IPv6 /64")
            i = bisect.bisect_left(ra, (mac,))
            if i < len(ra) and ra[i][0] == mac:
                if ra[i][1] != net6:
                    raise SnapshotError(f"{what} RA prefix: MAC {mac} is in two rooms")
                continue
            ra.insert(i, (mac, net6))
        new = object.__new__(Dhcp)
        for name in self.__dataclass_fields__:
            _set(new, name, getattr(self, name))
        _set(new, "reservations", tuple(rows))
        _set(new, "ra_prefixes", tuple(ra))
        return new

    def same_but_devices(self, other: Dhcp) -> bool:
        """Whether `other` differs from this input at most in its reservations and RA prefixes
        (the devices), not in anything Kea's or portal-ra's configuration says besides."""
        return all(
            getattr(self, name) == getattr(other, name)
            for name in self.__dataclass_fields__
            if name not in ("reservations", "ra_prefixes")
        )


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


@dataclass(frozen=True, slots=True)
class Resolver:
    """What this host's Unbound serves.

    `listen`: the host's own member-side address(es) (what the leases name); `allow`: the
    member networks (devices and registration ranges), everything else is refused;
    `ratelimit`: queries per second per client address (0: off); `forwarders`: send every
    query there (empty: recursion from the root servers, DNSSEC-validated); `local_name` with
    `local_addresses`: the portal's own name, answered locally."""

    listen: tuple[IPv4Address, ...]
    allow: tuple[IPNetwork, ...]
    ratelimit: int = 100
    forwarders: tuple[IPv4Address, ...] = ()
    local_name: str = ""
    local_addresses: tuple[IPv4Address, ...] = ()
    control_socket: str = "/run/unbound.ctl"
    pid_file: str = "/run/unbound.pid"
    username: str = "unbound"
    threads: int = 1

    def __post_init__(self) -> None:
        what = "resolver"
        _set(self, "listen", _ipv4s(self.listen, f"{what} listening addresses"))
        if not self.listen:
            raise SnapshotError(f"{what}: no listening address")
        _set(self, "allow", _networks(self.allow, f"{what} member networks"))
        if not self.allow:
            raise SnapshotError(f"{what}: no member network to serve")
        _int(self.ratelimit, f"{what} queries per second per client", 0, RATELIMIT_MAX)
        _int(self.threads, f"{what} threads", 1, 64)
        _set(self, "forwarders", _ipv4s(self.forwarders, f"{what} forwarders"))
        if self.local_name and (
            type(self.local_name) is not str
            or not _DOMAIN_RE.fullmatch(self.local_name)
            or "." not in self.local_name
        ):
            raise SnapshotError(f"{what}: portal name {self.local_name!r} is not a domain name")
        _set(self, "local_addresses", _ipv4s(self.local_addresses, f"{what} portal addresses"))
        if self.local_name and not self.local_addresses:
            raise SnapshotError(f"{what}: the portal name {self.local_name} has no address")
        _set(self, "control_socket", _path(self.control_socket, f"{what} control socket"))
        _set(self, "pid_file", _path(self.pid_file, f"{what} pid file"))
        if self.username and (
            type(self.username) is not str or not _USER_RE.fullmatch(self.username)
        ):
            raise SnapshotError(f"{what}: {self.username!r} is not a user name")

    def to_doc(self) -> dict[str, Any]:
        """The stored form (Snapshot.to_json)."""
        return {
            "listen": [str(a) for a in self.listen],
            "allow": [str(n) for n in self.allow],
            "ratelimit": self.ratelimit,
            "forwarders": [str(a) for a in self.forwarders],
            "local_name": self.local_name,
            "local_addresses": [str(a) for a in self.local_addresses],
            "control_socket": self.control_socket,
            "pid_file": self.pid_file,
            "username": self.username,
            "threads": self.threads,
        }

    @classmethod
    def from_doc(cls, doc: Any) -> Resolver:
        """The stored form back, validated again."""
        if not isinstance(doc, dict) or not set(doc) <= set(cls.__dataclass_fields__):
            raise SnapshotError("snapshot json: resolver is not an object of Resolver's fields")
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in doc.items()}
        return cls(**values)


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
