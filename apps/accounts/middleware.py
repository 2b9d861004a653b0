"""A session that still owes its second factor reaches only the pages that let it give one."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse

from apps.accounts.twofactor import second_factor_satisfied, session_enrolled


class SecondFactorMiddleware:
    """After the password, staff (under PORTAL_REQUIRE_STAFF_2FA) and everyone who set up an
    authenticator are sent to the code page, or to enrolment when they have none yet, before any
    other page, the admin or the session-authenticated API. Token-authenticated API calls carry
    no session and pass untouched."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self._open: tuple[str, ...] = ()

    def open_paths(self) -> tuple[str, ...]:
        """Path prefixes a half-signed-in session may reach."""
        if not self._open:
            self._open = (
                reverse("accounts:two_factor_verify"),
                reverse("accounts:two_factor_setup"),
                reverse("login"),
                reverse("logout"),
                reverse("set_language"),
                "/" + settings.STATIC_URL.lstrip("/"),
            )
        return self._open

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith(self.open_paths()) or second_factor_satisfied(request):
            return self.get_response(request)
        name = "two_factor_verify" if session_enrolled(request) else "two_factor_setup"
        target = reverse(f"accounts:{name}")
        if request.headers.get("HX-Request") == "true":
            # A polling fragment: the whole page goes to the code page, then back to itself.
            current = urlsplit(request.headers.get("HX-Current-URL", ""))
            page = current.path + (f"?{current.query}" if current.query else "") or "/"
            response = HttpResponse(status=204)
            response["HX-Redirect"] = f"{target}?{urlencode({'next': page})}"
            return response
        return redirect(f"{target}?{urlencode({'next': request.get_full_path()})}")
