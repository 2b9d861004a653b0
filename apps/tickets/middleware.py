"""The public status page's fast path: warm requests skip the rest of the middleware stack.

A status page request needs no session, user, CSRF token or messages; under load those cost
more than the page itself (the rendered HTML is a dict lookup in this process, or one Redis
GET). Placed right after SecurityMiddleware, so HTTPS redirects and security headers still
apply; a cold cache falls through to StatusPageView, which renders and stores the page.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import translation
from django.utils.cache import patch_vary_headers

from apps.tickets.status import status_html_get


def status_response(html: str, language: str) -> HttpResponse:
    """The page with the headers the skipped middleware would have set."""
    response = HttpResponse(html)
    response["Cache-Control"] = "public, max-age=15"
    response["Content-Language"] = language
    response["X-Frame-Options"] = "DENY"
    patch_vary_headers(response, ("Accept-Language", "Cookie"))
    return response


class StatusPageMiddleware:
    """Answer GET/HEAD of the status page from the cache when it is warm."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.path = ""

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not self.path:
            self.path = reverse("tickets:status_page")
        if request.path_info == self.path and request.method in ("GET", "HEAD"):
            language = translation.get_language_from_request(request)
            html = status_html_get(language)
            if html is not None:
                return status_response(html, language)
        return self.get_response(request)
