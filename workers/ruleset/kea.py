"""The ``kea-dhcp4`` artefact: Kea's configuration for one host, from the snapshot's `Dhcp`.

Design (docs/dhcp.md): **reservations only** for registered devices. Every host of a site serves
every device's reservation MAC -> private IPv4 from the same text, so whichever host answers, a
device gets the same address, and a lease survives a failover without lease synchronisation
(the client renews with its server; if that one is gone it rebinds by broadcast at T2 and the
other host confirms the same reserved address). Unknown MACs (class ``UNKNOWN``: no reservation)
get a short lease from this host's share of the registration ranges; the two hosts of a pair get
disjoint shares, so they never hand out one address twice.

Everything that reaches the text is a typed value from `Dhcp` (addresses, MACs, ints, checked
paths and domain), and the text is JSON written by `json.dumps`: no user text can inject
configuration.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

from workers.ruleset.host import Dhcp
from workers.ruleset.snapshot import Snapshot

LEASE_CMDS_HOOK = "/usr/lib/x86_64-linux-gnu/kea/hooks/libdhcp_lease_cmds.so"
SUBNET_ID = 1
REGISTRATION_CLASS = "unregistered"
RESERVATIONS_MARK = "@@reservations@@"
CAPTIVE_PORTAL_OPTION = "v4-captive-portal"  # DHCPv4 option 114 in Kea's option table


def _per_dhcp(converter: Callable[[Snapshot], str | None]) -> Callable[[Snapshot], str | None]:
    """Reuse the text of an earlier call for the same `Dhcp` object (identity: no comparison of
    60,000 reservations) and the same member interfaces, the only other input these converters
    read. The portal's worker passes the same object while no reservation or setting changed,
    so a change to a forward does not render Kea's configuration again. A few entries: one per
    host of the last compiles."""
    cache: dict[int, tuple[Dhcp, tuple[str, ...], str | None]] = {}

    @functools.wraps(converter)
    def cached(snapshot: Snapshot) -> str | None:
        d = snapshot.dhcp
        if d is None:
            return None
        interfaces = snapshot.host.member_interfaces
        hit = cache.get(id(d))
        if hit is not None and hit[0] is d and hit[1] == interfaces:
            return hit[2]
        text = converter(snapshot)
        while len(cache) >= 8:
            cache.pop(next(iter(cache)))
        cache[id(d)] = (d, interfaces, text)
        return text

    return cached


@_per_dhcp
def kea_config(snapshot: Snapshot) -> str | None:
    """Kea's JSON configuration for this host, or None when the host serves no DHCP."""
    d = snapshot.dhcp
    if d is None:
        return None
    options = [{"name": "routers", "data": str(d.router)}]
    if d.dns_servers:
        options.append({"name": "domain-name-servers", "data": ", ".join(map(str, d.dns_servers))})
    if d.domain:
        options.append({"name": "domain-name", "data": d.domain})
    # RFC 8910: only the walled garden's leases name the captive-portal API (a registered
    # device asks nothing; its API answer would be "not captive" anyway).
    captive = (
        {"option-data": [{"name": CAPTIVE_PORTAL_OPTION, "data": d.captive_portal.text}]}
        if d.captive_portal
        else {}
    )
    lease = d.lease_seconds
    short = d.registration_lease_seconds
    config = {
        "Dhcp4": {
            "interfaces-config": {
                "interfaces": list(d.interfaces or snapshot.host.member_interfaces),
                "dhcp-socket-type": "raw",
            },
            "control-socket": {"socket-type": "unix", "socket-name": d.control_socket},
            "lease-database": {
                "type": "memfile",
                "persist": True,
                "name": d.lease_file,
                "lfc-interval": 3600,
            },
            "hooks-libraries": [{"library": LEASE_CMDS_HOOK}],
            "host-reservation-identifiers": ["hw-address"],
            "reservations-global": False,
            "reservations-in-subnet": True,
            "reservations-out-of-pool": True,
            # Clients that came back with an address of the other host's pool share are told no
            # (they start over) instead of being ignored until the lease runs out.
            "authoritative": True,
            "valid-lifetime": lease,
            "renew-timer": lease // 2,
            "rebind-timer": lease * 7 // 8,
            "client-classes": [
                {
                    "name": REGISTRATION_CLASS,
                    "test": "member('UNKNOWN')",
                    "valid-lifetime": short,
                    "min-valid-lifetime": short,
                    "max-valid-lifetime": short,
                },
            ],
            "subnet4": [
                {
                    "id": SUBNET_ID,
                    "subnet": str(d.network),
                    "option-data": options,
                    "pools": [
                        {"pool": f"{a} - {b}", "client-class": REGISTRATION_CLASS, **captive}
                        for a, b in d.pools
                    ],
                    "reservations": RESERVATIONS_MARK,
                }
            ],
            "loggers": [
                {
                    "name": "kea-dhcp4",
                    "output_options": [{"output": "stdout"}],
                    "severity": "WARN",
                }
            ],
        }
    }
    # The reservations are most of the text (60,000 at 20,000 members): spelled directly, one
    # per line, from typed values only (MAC_RE-checked MACs, IPv4Address objects), instead of
    # through json.dumps of 60,000 dicts (3x faster; equal text for equal input either way).
    head, tail = json.dumps(config, indent=1).split(json.dumps(RESERVATIONS_MARK))
    rows = ",\n".join(_KEA_ROWS.rows(snapshot.host.name, d.reservations))
    return f"{head}[\n{rows}\n]{tail}\n"


class _Rows:
    """Each device's line of a configuration, kept from the host's last rendering by MAC (`str`
    of an address is most of the cost: about 0.3 s for 60,000 reservations): a text whose
    devices barely changed spells only the changed lines. Per host (each host's input holds
    its own address objects, so a line is found by identity); each memo holds exactly the rows
    of that host's last call, for the last `HOSTS` hosts. Equal input gives equal text whether
    a line comes from the memo or not."""

    HOSTS = 8

    def __init__(self, spell: Callable[[str, object], str]) -> None:
        self.spell = spell
        self.memo: dict[str, dict[str, tuple[object, str]]] = {}

    def rows(self, host: str, items: tuple[tuple[str, object], ...]) -> list[str]:
        old = self.memo.get(host) or {}
        new: dict[str, tuple[object, str]] = {}
        out, spell = [], self.spell
        for mac, value in items:
            hit = old.get(mac)
            if hit is None or (hit[0] is not value and hit[0] != value):
                hit = (value, spell(mac, value))
            new[mac] = hit
            out.append(hit[1])
        # Whole dicts replaced, never changed in place: a compile in another thread keeps its
        # own `old`.
        memo = {k: v for k, v in self.memo.items() if k != host}
        while len(memo) >= self.HOSTS:
            memo.pop(next(iter(memo)))
        memo[host] = new
        self.memo = memo
        return out


_KEA_ROWS = _Rows(lambda mac, ip: f'{{"hw-address": "{mac}", "ip-address": "{ip}"}}')
_RA_ROWS = _Rows(lambda mac, net: f'  "{mac}": "{net}"')
PREFIXES_MARK = "@@prefixes@@"


RA_SOURCE = "fe80::1"  # the gateway's virtual link-local address (moves with the IPv6 role)


@_per_dhcp
def ra_config(snapshot: Snapshot) -> str | None:
    """deploy/firewall/portal-ra's configuration: each device's room /64 by MAC."""
    d = snapshot.dhcp
    if d is None:
        return None
    interfaces = d.interfaces or snapshot.host.member_interfaces
    config = {
        "interface": interfaces[0],
        "source": RA_SOURCE,
        "router_lifetime": 1800,
        "valid_lifetime": 86400,
        "preferred_lifetime": 14400,
        "refresh": 600,
        "pid_file": d.ra_pid_file,
        "prefixes": PREFIXES_MARK,
    }
    # What json.dumps(config, indent=1, sort_keys=True) spells for the prefixes (MACs in sorted
    # order, as `Dhcp` keeps them; MACs and prefixes need no escaping), line by line from the
    # last rendering (tests/unit/ruleset/test_kea_delta.py compares both spellings).
    head, tail = json.dumps(config, indent=1, sort_keys=True).split(json.dumps(PREFIXES_MARK))
    rows = _RA_ROWS.rows(snapshot.host.name, d.ra_prefixes)
    prefixes = "{\n" + ",\n".join(rows) + "\n }" if rows else "{}"
    return f"{head}{prefixes}{tail}\n"
