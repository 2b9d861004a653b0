"""Rate limits kept in Redis, shared by every web worker: API requests per token, tickets opened
per member, password-reset mails per address and per client.

Fixed windows (one INCR + EXPIRE per hit): atomic across workers, bounded (each key expires with
its window), and the Retry-After is exact. Limits are settings (PORTAL_THROTTLE_RATES, "N/s|m|h|d").
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Any

from django.conf import settings
from django.utils.translation import gettext_lazy as _
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from apps.infra.redis import redis_client

PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
KEY_PREFIX = "portal:throttle:"


def rate_of(scope: str) -> tuple[int, int]:
    """(requests, seconds) of the setting for `scope`, e.g. "10/h" -> (10, 3600)."""
    text = settings.PORTAL_THROTTLE_RATES[scope]
    count, _slash, period = text.partition("/")
    return int(count), PERIODS[period.strip()[0]]


def throttle_hit(scope: str, key: str) -> int | None:
    """Count one use of `scope` by `key`: None while within the limit, else the seconds until
    the next use is allowed."""
    limit, seconds = rate_of(scope)
    now = time.time()
    window = int(now // seconds)
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]  # addresses stay out of Redis
    name = f"{KEY_PREFIX}{scope}:{digest}:{window}"
    pipe = redis_client().pipeline()
    pipe.incr(name)
    pipe.expire(name, seconds + 1)
    used, _ok = pipe.execute()
    if int(used) <= limit:
        return None
    return max(1, math.ceil((window + 1) * seconds - now))


def retry_text(seconds: int) -> str:
    """“in 3 minutes”-style wording for messages, rounded up."""
    from django.utils.translation import ngettext

    if seconds < 120:
        return ngettext("%(n)d second", "%(n)d seconds", seconds) % {"n": seconds}
    minutes = math.ceil(seconds / 60)
    return ngettext("%(n)d minute", "%(n)d minutes", minutes) % {"n": minutes}


class PortalThrottle(BaseThrottle):
    """A DRF throttle over throttle_hit(); DRF answers 429 with Retry-After."""

    scope = ""

    def key(self, request: Request, view: Any) -> str | None:
        raise NotImplementedError

    def allow_request(self, request: Request, view: Any) -> bool:
        key = self.key(request, view)
        self._wait = throttle_hit(self.scope, key) if key else None
        return self._wait is None

    def wait(self) -> float | None:
        return self._wait


class TokenRateThrottle(PortalThrottle):
    """Every API request, per token (per user for session clients)."""

    scope = "api"

    def key(self, request: Request, view: Any) -> str | None:
        token = getattr(request.auth, "key", None)
        if token:
            return f"token:{token}"
        user = request.user
        return f"user:{user.pk}" if user and user.is_authenticated else None


class TicketCreateThrottle(PortalThrottle):
    """Tickets opened per member (POST only)."""

    scope = "ticket_create"

    def key(self, request: Request, view: Any) -> str | None:
        if request.method != "POST" or not request.user.is_authenticated:
            return None
        return f"user:{request.user.pk}"


THROTTLED_MESSAGE = _("Too many requests. Please try again in %(wait)s.")
