"""The client's real address behind the portal's own reverse proxies.

`REMOTE_ADDR` is the TCP peer. When that peer is one of `PORTAL_TRUSTED_PROXIES` (networks,
loopback by default), the proxy's `X-Forwarded-For` is read from the right: each hop a trusted
proxy appended is skipped, and the first address no trusted proxy vouches for is the client. An
`X-Forwarded-For` from an untrusted peer is ignored, so nobody forges their address by sending one.
"""

from __future__ import annotations

import ipaddress
from functools import cache

from django.conf import settings
from django.http import HttpRequest

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@cache
def _trusted(spec: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(item, strict=False) for item in spec)


def _parse(text: str) -> Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [2001:db8::1]:443
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # 192.0.2.1:443
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def is_trusted_proxy(address: Address) -> bool:
    return any(address in net for net in _trusted(tuple(settings.PORTAL_TRUSTED_PROXIES)))


def client_address(request: HttpRequest) -> Address | None:
    """The client's address, or None when not even the TCP peer is an address (tests, sockets)."""
    peer = _parse(request.META.get("REMOTE_ADDR", ""))
    if peer is None or not is_trusted_proxy(peer):
        return peer
    hops = [hop for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
    for hop in reversed(hops):
        address = _parse(hop)
        if address is None:
            return peer  # a malformed hop: trust nothing the proxies passed on
        if not is_trusted_proxy(address):
            return address
    return peer


def client_ip(request: HttpRequest) -> str:
    """`client_address` as text ("" when unknown), for logs and the audit trail (rate limits and
    the lockout count `client_key`)."""
    address = client_address(request)
    return "" if address is None else str(address)


def client_key(request: HttpRequest) -> str:
    """Who a limit counts ("" when unknown): an IPv4 client by its address, an IPv6 client by
    its /64 (written as the network's first address, so it stays an address). A host owns its
    whole /64 and picks any of its 2^64 addresses at will: counting each address apart, eight
    wrong passwords from one /64 never locked anything out."""
    address = client_address(request)
    if address is None:
        return ""
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, 64), strict=False).network_address)
    return str(address)
