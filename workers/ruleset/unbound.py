"""The ``unbound`` artefact: the members' resolver on one host, from the snapshot's `Resolver`.

Design (docs/dns.md): every host of a site with a resolver address runs Unbound on its **own**
member-side address; a lease names every resolver of the site (Kea's ``domain-name-servers``,
in rollout order), so both hosts serve at once and a client whose first server does not answer
asks the second (its stub resolver's time-out). No VRRP address: a resolver does not depend on
which host holds the gateway, and a host whose Unbound stops is covered by the other at once.

Only typed values reach the text (`Resolver` validates every field; names are checked domain
names, addresses and networks are `ipaddress` objects, paths a safe character set, numbers
bounded ints), and each line is written by this module: no text from the database is copied
into Unbound's configuration.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workers.ruleset.values import (
    _DOMAIN_RE,
    IPNetwork,
    IPv4Address,
    SnapshotError,
    _int,
    _ipv4s,
    _networks,
    _path,
    _set,
)

if TYPE_CHECKING:
    from workers.ruleset.snapshot import Snapshot

UNBOUND_ARTEFACT = "unbound"
RATELIMIT_MAX = 1_000_000
_USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
# Debian's unbound package keeps the root trust anchor here (unbound-anchor updates it).
ROOT_TRUST_ANCHOR = "/var/lib/unbound/root.key"


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


def _q(text: str) -> str:
    # Only checked values reach here (addresses, networks, domain names, safe paths); the quotes
    # are Unbound's syntax, never escaping.
    return f'"{text}"'


def unbound_config(snapshot: Snapshot) -> str | None:
    """Unbound's configuration for this host, or None when it runs no resolver."""
    r = snapshot.resolver
    if r is None:
        return None
    if type(r) is not Resolver:
        raise SnapshotError("snapshot: resolver is not a Resolver")
    server = [
        "verbosity: 1",
        "use-syslog: no",
        'logfile: ""',
        'chroot: ""',
        f"username: {_q(r.username)}",
        f"pidfile: {_q(r.pid_file)}",
        f"num-threads: {r.threads}",
        "interface-automatic: no",
        *(f"interface: {a}" for a in r.listen),
        "port: 53",
        "do-ip6: yes",
        # Nobody but the members: refuse everything, allow their networks (an open resolver is
        # an amplifier for the whole Internet).
        "access-control: 0.0.0.0/0 refuse",
        "access-control: ::0/0 refuse",
        *(f"access-control: {n} allow" for n in r.allow),
        # One device flooding cannot starve the others: queries over the limit are dropped
        # (before the cache; one in ten gets through, so a client can still resolve slowly).
        *(
            (f"ip-ratelimit: {r.ratelimit}", "ip-ratelimit-factor: 10")
            if r.ratelimit
            else ("ip-ratelimit: 0",)
        ),
        "hide-identity: yes",
        "hide-version: yes",
        "qname-minimisation: yes",
        "so-reuseport: yes",
        # SERVFAIL counts and the like for the portal's health samples (stats_noreset).
        "extended-statistics: yes",
        "statistics-cumulative: no",
        "statistics-interval: 0",
        # Forwarders (the lab's authoritative server, or the ISP's own) are trusted to
        # validate; recursion from the root validates with Debian's root trust anchor.
        f"module-config: {_q('iterator' if r.forwarders else 'validator iterator')}",
        *(() if r.forwarders else (f"auto-trust-anchor-file: {_q(ROOT_TRUST_ANCHOR)}",)),
    ]
    if r.local_name:
        server.append(f"local-zone: {_q(r.local_name + '.')} static")
        server.extend(
            f"local-data: {_q(f'{r.local_name}. 300 IN A {a}')}" for a in r.local_addresses
        )
    lines = [
        f"# The members' resolver of {snapshot.host.name}: generated by the portal",
        "# (workers/ruleset/unbound.py). Edits here show as drift and are replaced.",
        "server:",
        *(f"    {line}" for line in server),
        "remote-control:",
        "    control-enable: yes",
        f"    control-interface: {_q(r.control_socket)}",
        "    control-use-cert: no",
    ]
    if r.forwarders:
        lines += [
            "forward-zone:",
            '    name: "."',
            *(f"    forward-addr: {a}" for a in r.forwarders),
        ]
    return "\n".join(lines) + "\n"


def site_resolvers(addresses: list[str | None]) -> tuple[IPv4Address, ...]:
    """The resolver addresses of a site's hosts (rollout order, blanks skipped), as typed
    addresses: what Kea hands out as the DNS servers of that site's leases."""
    out: list[IPv4Address] = []
    for a in addresses:
        if a:
            ip = ipaddress.IPv4Address(a)
            if ip not in out:
                out.append(ip)
    return tuple(out)
