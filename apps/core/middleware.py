"""Refuse a NUL byte in any query parameter before a view sees it.

PostgreSQL text cannot hold NUL, so a search or filter carrying one used to end in a 500 deep in
the database driver. No name, address, room or word ever contains it: the whole request is bad.
The API answers 400 with the parameter's name (DRF's shape); a page answers a short 400 page.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.utils.translation import gettext as _


def nul_parameters(request: HttpRequest) -> list[str]:
    """The names of query parameters whose name or any value contains a NUL byte."""
    return sorted(
        {
            key.replace("\x00", "\\0")
            for key, values in request.GET.lists()
            if "\x00" in key or any("\x00" in value for value in values)
        }
    )


class NulByteRefusalMiddleware:
    """400 for a query string with a NUL byte (API: {parameter: [message]})."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        bad = nul_parameters(request)
        if not bad:
            return self.get_response(request)
        message = _("This parameter contains a NUL character, which no value may contain.")
        if request.path.startswith("/api/"):
            return JsonResponse({name: [message] for name in bad}, status=400)
        return HttpResponseBadRequest(
            f"<!doctype html><title>400</title><p>{message}</p>", content_type="text/html"
        )
