"""htmx in views: `htmx_partial(request)` decides between a page and its fragment; requests that
lose their session get one full-page redirect to the login page (HX-Redirect) instead of a login
form swapped into every polling badge."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import resolve_url


def htmx_partial(request: HttpRequest) -> bool:
    """True when htmx asks for a fragment to swap in; False for a plain or boosted page load
    (a boosted link wants the whole page, as NetBox's helper of the same name says)."""
    htmx = getattr(request, "htmx", None)
    return bool(htmx and not htmx.boosted)


class HtmxLoginRedirectMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.headers.get("HX-Request") != "true" or response.status_code not in (301, 302):
            return response
        login = resolve_url(settings.LOGIN_URL)
        if urlsplit(response.get("Location", "")).path != login:
            return response
        # Back to the page the user looked at (not the fragment URL the badge polled).
        current = urlsplit(request.headers.get("HX-Current-URL", ""))
        page = current.path or "/"
        if current.query:
            page += f"?{current.query}"
        redirect = HttpResponse(status=204)
        redirect["HX-Redirect"] = f"{login}?{urlencode({'next': page})}"
        return redirect
