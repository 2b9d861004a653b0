"""One way to handle a page with several POST actions: one small view per action, each at its
own URL (as apps/network does for devices, forwards and openings).

Forms that still name their action in an `action` field and post to the page itself (pages
rendered before the per-action URLs, scripts) reach the same view through
`action_field_dispatch`, so both ways run the same code.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.views import View


def action_field_dispatch(
    request: HttpRequest,
    views: Iterable[type[View]],
    *,
    default: str | None = None,
    **kwargs: Any,
) -> HttpResponse:
    """Answer a POST whose `action` field names one of `views` (by their `action` attribute)
    with that view; an unknown action is `default`'s, or 404 without one."""
    by_name = {view.action: view for view in views}  # type: ignore[attr-defined]
    view = by_name.get(request.POST.get("action", "")) or by_name.get(default or "")
    if view is None:
        raise Http404
    return view.as_view()(request, **kwargs)
