"""The abuse desk's page: address + point in time -> who held it, with the evidence."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views import View

from apps.abuse.forms import LookupForm
from apps.abuse.inputs import LookupInvalid, portal_zone
from apps.abuse.selectors import LookupAnswer
from apps.abuse.services import abuse_lookup, retention_days
from apps.accounts.roles import Role, RoleRequiredMixin
from apps.accounts.throttle import THROTTLED_MESSAGE, retry_text, throttle_hit
from apps.core.htmx import htmx_partial

TEMPLATE = "abuse/lookup_form.html"


def _render(
    request: HttpRequest, form: LookupForm, answer: LookupAnswer | None = None, status: int = 200
) -> HttpResponse:
    template = TEMPLATE
    if htmx_partial(request):
        template += "#abuse-lookup"
    context = {
        "form": form,
        "answer": answer,
        "zone": portal_zone().key,
        "retention_days": retention_days(),
    }
    return render(request, template, context, status=status)


class AbuseLookupView(RoleRequiredMixin, View):
    """GET: the form; POST: the audited lookup and its answer (the form again on bad input)."""

    required_roles = (Role.ABUSE,)

    def get(self, request: HttpRequest) -> HttpResponse:
        # ?address=...&at=... prefills the form (a link from a complaint); only POST looks up.
        initial = {name: request.GET.get(name, "")[:100] for name in ("address", "at")}
        return _render(request, LookupForm(initial=initial))

    def post(self, request: HttpRequest) -> HttpResponse:
        form = LookupForm(request.POST)
        if not form.is_valid():
            return _render(request, form, status=200 if htmx_partial(request) else 422)
        if wait := throttle_hit("abuse_lookup", f"user:{request.user.pk}"):
            form.add_error(None, THROTTLED_MESSAGE % {"wait": retry_text(wait)})
            return _render(request, form, status=429)
        try:
            answer = abuse_lookup(
                actor=request.user,
                address=form.cleaned_data["address"],
                at=form.cleaned_data["at"],
                reason=form.cleaned_data["reason"],
            )
        except LookupInvalid as exc:
            for field, messages in exc.errors.items():
                for message in messages:
                    form.add_error(field, message)
            return _render(request, form, status=200 if htmx_partial(request) else 422)
        return _render(request, form, answer)
