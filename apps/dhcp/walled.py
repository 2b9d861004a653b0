"""The walled garden in the portal: a request from a registration range is an unregistered
device; it sees "This device is not registered" (and can sign in and register it), nothing else."""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable

import structlog
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from apps.core.clientip import client_address
from apps.dhcp.models import RegistrationRange

log = structlog.get_logger(__name__)

# Where an unregistered device may go besides the page itself: signing in and out, signing
# up, the language switch, static files.
ALLOWED_PREFIXES = (
    "/accounts/",  # sign in and out, password reset
    "/signup/",
    "/i18n/",
    "/static/",
    "/healthz",
    "/api/captive-portal/",  # RFC 8908: the OS asks whether it is captive
    "/metrics",
)
_CACHE_SECONDS = 10.0
_cache: tuple[float, tuple[ipaddress.IPv4Network, ...]] = (0.0, ())


def registration_networks() -> tuple[ipaddress.IPv4Network, ...]:
    """The enabled registration ranges (read at most every 10 s per process). While the
    database does not answer, the ranges last read: this runs before every page, the public
    status page too, which must still be served then (its last known state)."""
    global _cache
    now = time.monotonic()
    if now - _cache[0] > _CACHE_SECONDS:
        try:
            nets = tuple(
                ipaddress.IPv4Network(n)
                for n in RegistrationRange.objects.filter(enabled=True).values_list(
                    "network", flat=True
                )
            )
        except DatabaseError as exc:
            log.warning("walled_garden.ranges_unread", error=str(exc))
            nets = _cache[1]
        _cache = (now, nets)
    return _cache[1]


def registration_networks_forget() -> None:
    global _cache
    _cache = (0.0, ())


def unregistered_address(request: HttpRequest) -> str | None:
    """The client's address when it lies in a registration range, else None."""
    address = client_address(request)
    if not isinstance(address, ipaddress.IPv4Address):
        return None
    return str(address) if any(address in n for n in registration_networks()) else None


class WalledGardenMiddleware:
    """Send every request from a registration range to the "not registered" page."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        page = reverse("dhcp:unregistered")
        path = request.path
        if path != page and not path.startswith(ALLOWED_PREFIXES) and unregistered_address(request):
            return HttpResponseRedirect(page)
        return self.get_response(request)
