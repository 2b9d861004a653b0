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
from django.contrib.auth.signals import user_login_failed
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
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


def _window_key(scope: str, key: str, seconds: int, now: float) -> tuple[str, int]:
    window = int(now // seconds)
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]  # addresses stay out of Redis
    return f"{KEY_PREFIX}{scope}:{digest}:{window}", window


def throttle_reached(scope: str, key: str) -> bool:
    """True when `key` has used up `scope` in the current window (counts nothing)."""
    limit, seconds = rate_of(scope)
    name, _window = _window_key(scope, key, seconds, time.time())
    return int(redis_client().get(name) or 0) >= limit


def throttle_hit(scope: str, key: str) -> int | None:
    """Count one use of `scope` by `key`: None while within the limit, else the seconds until
    the next use is allowed."""
    limit, seconds = rate_of(scope)
    now = time.time()
    name, window = _window_key(scope, key, seconds, now)
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


class AbuseLookupThrottle(PortalThrottle):
    """Abuse lookups per user (POST; the page counts the same key): each one reads who held an
    address, so a stolen desk login cannot map the whole address history in one go."""

    scope = "abuse_lookup"

    def key(self, request: Request, view: Any) -> str | None:
        if request.method != "POST" or not request.user.is_authenticated:
            return None
        return f"user:{request.user.pk}"


def account_key(username: str) -> str:
    return f"account:{username.strip().lower()}"


class AccountFailureCapBackend:
    """The per-account cap: once an account has had PORTAL_THROTTLE_RATES["login_account"]
    failed sign-ins in the window, from all clients together, it refuses every sign-in (the
    lockout page, 429) until the window ends. The lockout per client (axes) cannot see a guess
    spread over many clients; this can. Authenticates nobody itself, and has no get_user(): a
    session never names it as its backend."""

    def authenticate(
        self, request: Any, username: str | None = None, password: str | None = None, **kw: Any
    ) -> None:
        if request is None or not username:
            return
        if throttle_reached("login_account", account_key(username)):
            request.axes_locked_out = True  # AxesMiddleware answers with the lockout page
            raise PermissionDenied
        return


@receiver(user_login_failed, dispatch_uid="login_account_failure_count")
def login_account_failure_count(sender: Any, credentials: dict[str, Any], **kw: Any) -> None:
    """Count every failed sign-in against its account (the per-account cap)."""
    username = credentials.get("username")
    if username:
        throttle_hit("login_account", account_key(str(username)))


THROTTLED_MESSAGE = _("Too many requests. Please try again in %(wait)s.")
