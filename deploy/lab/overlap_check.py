#!/usr/bin/python3
"""Refuse to build the lab when a lab range overlaps the root namespace's own networks.

Reads the root namespace's addresses and routes (``ip -j addr``, ``ip -j [-6] route show table
all``), ignores what the lab itself put there (links named ``pl-*``), adds the ranges named in
``PL_LAB_EXTRA_ROOT_RANGES`` (comma/space separated, for tests), and exits 1 with a clear message
when any lab range overlaps one of them.  Standard library only; ``find_overlaps`` is pure.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys

LAB_RANGES = [
    # Management network (root side 10.255.255.1, hosts .11 and .12): a /28, not the contract's
    # /24, because machines here resolve names through 10.255.255.53, which a /24 on a lab link
    # would shadow (cutting the machine off DNS while the lab is up).
    "10.255.255.0/28",
    "10.255.254.0/30",  # the pair's sync link (pl-sync, between the two hosts only)
    "10.100.0.0/16",  # private member space
    "198.51.100.0/24",  # public pool
    "203.0.113.0/24",  # Internet side
    "2001:db8::/32",  # member and Internet-side IPv6
]
LAB_LINK_PREFIX = "pl-"
IGNORED_ROUTE_TYPES = {"local", "broadcast", "multicast", "anycast", "nat", "throw"}


def _net(value: str, prefixlen: int | None = None):
    text = value if prefixlen is None else f"{value}/{prefixlen}"
    return ipaddress.ip_network(text, strict=False)


def root_claims(addrs: list[dict], routes: list[dict], extra: list[str]) -> list[tuple[str, str]]:
    """(network, where) for every address, route and gateway of the root namespace."""
    claims: list[tuple[str, str]] = []
    for link in addrs:
        name = link.get("ifname", "?")
        if name.startswith(LAB_LINK_PREFIX):
            continue
        for info in link.get("addr_info", []):
            if info.get("family") not in ("inet", "inet6"):
                continue
            net = _net(info["local"], info.get("prefixlen"))
            claims.append((str(net), f"address {info['local']}/{info.get('prefixlen')} on {name}"))
    for route in routes:
        dev = route.get("dev", "")
        if dev.startswith(LAB_LINK_PREFIX) or route.get("type") in IGNORED_ROUTE_TYPES:
            continue
        dst = route.get("dst", "")
        where = f"route {dst} dev {dev or '?'}" + (
            f" table {route['table']}" if route.get("table") else ""
        )
        if dst and dst != "default":
            claims.append((str(_net(dst)), where))
        gateway = route.get("gateway")
        if gateway:
            claims.append((str(_net(gateway)), f"gateway {gateway} ({where})"))
    claims.extend((str(_net(item)), "PL_LAB_EXTRA_ROOT_RANGES") for item in extra)
    claims.extend((str(_net(ns)), "nameserver in /etc/resolv.conf") for ns in nameservers())
    return claims


def nameservers(path: str = "/etc/resolv.conf") -> list[str]:
    """The resolvers the machine uses: a lab link must never capture the route to them."""
    found = []
    try:
        with open(path) as handle:
            for line in handle:
                parts = line.split()
                if len(parts) >= 2 and parts[0] == "nameserver":
                    try:
                        found.append(str(ipaddress.ip_address(parts[1].split("%")[0])))
                    except ValueError:
                        continue
    except OSError:
        return []
    return found


def find_overlaps(
    addrs: list[dict], routes: list[dict], extra: list[str] | None = None, lab=LAB_RANGES
) -> list[str]:
    problems = []
    for claim, where in root_claims(addrs, routes, extra or []):
        claim_net = _net(claim)
        for lab_range in lab:
            lab_net = _net(lab_range)
            if claim_net.version == lab_net.version and claim_net.overlaps(lab_net):
                problems.append(f"lab range {lab_range} overlaps {claim} ({where})")
    return problems


def _ip_json(*args: str) -> list[dict]:
    out = subprocess.run(  # noqa: S603
        ["ip", "-j", *args],  # noqa: S607
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout
    return json.loads(out or "[]")


def main() -> int:
    extra = os.environ.get("PL_LAB_EXTRA_ROOT_RANGES", "").replace(",", " ").split()
    addrs = _ip_json("addr", "show")
    routes = _ip_json("-4", "route", "show", "table", "all") + _ip_json(
        "-6", "route", "show", "table", "all"
    )
    problems = find_overlaps(addrs, routes, extra)
    if problems:
        sys.stderr.write(
            "lab.sh: REFUSING to build the lab: the root namespace already uses a lab range.\n"
            "  Building it would put these addresses next to the machine's own network and could\n"
            "  cut the machine off. Conflicts:\n" + "".join(f"  - {p}\n" for p in problems)
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
