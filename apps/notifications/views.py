"""A member's notices and notification preferences: thin views over selectors and services."""

from __future__ import annotations

from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.views import View

from apps.core.htmx import htmx_partial
from apps.members.models import Member
from apps.members.selectors import member_of_user
from apps.notifications.forms import PreferenceForm
from apps.notifications.selectors import notice_get, notice_list, preference_of
from apps.notifications.services import preference_update

PAGE_SIZE = 20


def _member(request: HttpRequest) -> Member:
    member = member_of_user(user=request.user)
    if member is None:
        raise Http404
    return member


class NoticeListView(LoginRequiredMixin, View):
    """The member's notices, newest first, a page at a time."""

    def get(self, request: HttpRequest) -> HttpResponse:
        page = Paginator(notice_list(actor=request.user), PAGE_SIZE).get_page(
            request.GET.get("page")
        )
        template = "notifications/notice_list.html"
        if htmx_partial(request):
            template += "#notice-table"
        return render(request, template, {"page": page})


class NoticeDetailView(LoginRequiredMixin, View):
    """One notice in full (only one's own: anyone else's answers 404)."""

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        notice = notice_get(actor=request.user, pk=pk)
        return render(request, "notifications/notice_detail.html", {"notice": notice})


class PreferenceView(LoginRequiredMixin, View):
    """Which notices also come by mail, and in which language."""

    template = "notifications/preference_form.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        preference = preference_of(member=_member(request))
        return render(request, self.template, {"form": PreferenceForm(preference=preference)})

    def post(self, request: HttpRequest) -> HttpResponse:
        member = _member(request)
        form = PreferenceForm(request.POST, preference=preference_of(member=member))
        context: dict[str, object] = {"form": form}
        status = 422
        if form.is_valid():
            preference = preference_update(
                member=member,
                language=form.cleaned_data["language"],
                mail=form.mail_choices(),
                actor=request.user,
            )
            context = {"form": PreferenceForm(preference=preference), "saved": _("Saved.")}
            status = 200
        template = self.template
        if htmx_partial(request):
            template += "#preference-form"
        return render(request, template, context, status=status)
