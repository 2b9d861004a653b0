"""Password reset with rate limits: per client (a 429 page that says when to try again) and per
address (silently no second mail within the window, so the page reveals nothing about the
address)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import views as auth_views
from django.http import HttpResponse, HttpResponseRedirect

from apps.accounts.throttle import THROTTLED_MESSAGE, retry_text, throttle_hit
from apps.core.clientip import client_key


def throttled_form(view: Any, form: Any, wait: int) -> HttpResponse:
    """The form again with the limit's message at the top: 429 with Retry-After."""
    form.add_error(None, THROTTLED_MESSAGE % {"wait": retry_text(wait)})
    response = view.form_invalid(form)
    response.status_code = 429
    response["Retry-After"] = str(wait)
    return response


class PasswordResetView(auth_views.PasswordResetView):
    def form_valid(self, form: Any) -> HttpResponse:
        wait = throttle_hit("password_reset_client", client_key(self.request) or "unknown")
        if wait:
            return throttled_form(self, form, wait)
        if throttle_hit("password_reset_address", form.cleaned_data["email"].strip().lower()):
            return HttpResponseRedirect(self.get_success_url())
        return super().form_valid(form)
