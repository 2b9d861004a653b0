"""Test accesses at office hours (staff): the panel on the member page with its grant, extend
and end actions (htmx, in place), the list of those ending soon, and the older grant action of
the member page."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import formats, timezone
from django.utils.translation import gettext, gettext_lazy, ngettext
from django.views import View
from django_htmx.http import trigger_client_event

from apps.accounts.roles import StaffOr404Mixin, StaffRequiredMixin
from apps.audit.selectors import audit_for_member
from apps.core.htmx import htmx_partial
from apps.members.models import Member
from apps.members.views import MemberActionView, member_action_forms
from apps.network.errors import NetworkError
from apps.network.selectors import shaping_profiles
from apps.network.views import _form_errors_to_messages, _form_refused, _member_or_404
from apps.testaccess.forms import MemberTestAccessForm, TestAccessEndForm, TestAccessForm
from apps.testaccess.selectors import expiring_test_accesses, member_test_access
from apps.testaccess.services import (
    member_test_access_end,
    member_test_access_extend,
    member_test_access_grant,
)


def member_test_access_context(
    *,
    request: HttpRequest,
    member: Member,
    grant_form: TestAccessForm | None = None,
    extend_form: TestAccessForm | None = None,
    end_form: TestAccessEndForm | None = None,
    open_form: str = "",
    notice: str = "",
) -> dict[str, Any]:
    """The test-access section of the member page."""
    access = member_test_access(member=member)
    initial_until = member.test_access_until or (timezone.localdate() + dt.timedelta(days=14))
    profile = access.profile if access else shaping_profiles().first()
    return {
        "test_access": access,
        "test_access_grant_form": grant_form
        or TestAccessForm(
            initial={"until": timezone.localdate() + dt.timedelta(days=14), "profile": profile},
            prefix="grant",
        ),
        "test_access_extend_form": extend_form
        or TestAccessForm(
            initial={"until": initial_until + dt.timedelta(days=7), "profile": profile},
            prefix="extend",
        ),
        "test_access_end_form": end_form or TestAccessEndForm(prefix="end"),
        "test_access_open": open_form,
        "test_access_notice": notice,
    }


def _test_access_section(request: HttpRequest, member: Member, **kwargs: Any) -> HttpResponse:
    """The section with the refused form (htmx); the member page otherwise."""
    url = reverse("members:member_detail", args=[member.pk]) + "#test-access"
    if htmx_partial(request):
        context = {
            "member": member,
            **member_test_access_context(request=request, member=member, **kwargs),
        }
        return render(request, "testaccess/partials/test_access.html", context)
    return redirect(url)


def _test_access_done_text(action: str, member: Member) -> str:
    if action == "end":
        return gettext("Test access ended; the member is pending again.")
    until = formats.date_format(member.test_access_until, "SHORT_DATE_FORMAT")
    if action == "grant":
        return gettext("Test access granted until %(until)s (last day).") % {"until": until}
    return gettext("Test access extended until %(until)s (last day).") % {"until": until}


def _test_access_done(request: HttpRequest, member: Member, action: str) -> HttpResponse:
    """After a grant, extension or end: for htmx the panel again in place, with fresh forms and
    the confirmation, plus the member's status, facts and audit trail out of band (they changed
    with it); the member page with the message otherwise."""
    member = _member_or_404(request, member.pk)  # status, dates and access as saved
    text = _test_access_done_text(action, member)
    if not htmx_partial(request):
        messages.success(request, text)
        return redirect(reverse("members:member_detail", args=[member.pk]) + "#test-access")

    context = {
        "member": member,
        **member_test_access_context(request=request, member=member, notice=text),
    }
    html = render_to_string("testaccess/partials/test_access.html", context, request=request)
    oob = {
        "member": member,
        "oob": True,
        "forms": member_action_forms(member),
        "audit": Paginator(audit_for_member(member=member).select_related("actor"), 25).get_page(1),
    }
    for template in (
        "members/member_detail.html#member-status",
        "members/member_detail.html#member-facts",
        "members/member_detail.html#member-addresses",
        "members/member_detail.html#member-actions",
        "audit/partials/trail.html",
    ):
        html += render_to_string(template, oob, request=request)
    response = HttpResponse(html)
    # The devices, forwards and openings sections fetch themselves again: whether the firewalls
    # carry them (and so their live state) follows the membership's status.
    return trigger_client_event(response, "memberChanged")


class TestAccessSectionView(StaffOr404Mixin, View):
    """GET: the test-access panel again (cancel); each action below POSTs to its own URL."""

    __test__ = False  # not a pytest class

    def get(self, request: HttpRequest, member_pk: int, action: str = "") -> HttpResponse:
        return _test_access_section(request, _member_or_404(request, member_pk))


class TestAccessActionView(TestAccessSectionView):
    """POST one test-access action (volunteers, from the member page): the subclasses grant,
    extend and end.

    Success shows the panel again with the confirmation (htmx) or the member page; a refusal
    shows the form again with the message next to its field.
    """

    action: str
    form_class: type[forms.Form] = TestAccessForm

    def run(self, member: Member, actor: Any, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def post(self, request: HttpRequest, member_pk: int, action: str = "") -> HttpResponse:
        member = _member_or_404(request, member_pk)
        form = self.form_class(request.POST, prefix=self.action)
        if form.is_valid():
            try:
                self.run(member, request.user, form.cleaned_data)
            except NetworkError as exc:
                _form_refused(request, form, exc)
            else:
                return _test_access_done(request, member, self.action)
        _form_errors_to_messages(request, form)
        return _test_access_section(
            request, member, open_form=self.action, **{f"{self.action}_form": form}
        )


class TestAccessGrantView(TestAccessActionView):
    action = "grant"

    def run(self, member: Member, actor: Any, data: dict[str, Any]) -> None:
        member_test_access_grant(
            member=member, until=data["until"], profile=data["profile"], actor=actor
        )


class TestAccessExtendView(TestAccessActionView):
    action = "extend"

    def run(self, member: Member, actor: Any, data: dict[str, Any]) -> None:
        member_test_access_extend(
            member=member, until=data["until"], profile=data["profile"], actor=actor
        )


class TestAccessEndView(TestAccessActionView):
    action = "end"
    form_class = TestAccessEndForm

    def run(self, member: Member, actor: Any, data: dict[str, Any]) -> None:
        member_test_access_end(member=member, note=data["note"], actor=actor)


class TestAccessListView(StaffRequiredMixin, View):
    """Test accesses ending within the next days (default 7), soonest first, paginated."""

    __test__ = False  # not a pytest class

    def get(self, request: HttpRequest) -> HttpResponse:
        try:
            days = max(0, min(int(request.GET.get("days", 7)), 365))
        except ValueError:
            days = 7
        members = expiring_test_accesses(actor=request.user, within_days=days)
        page = Paginator(members, 50).get_page(request.GET.get("page"))
        context = {
            "page": page,
            "days": days,
            "today": timezone.localdate(),
            "page_extra": f"&days={days}",
            "day_choices": [
                (n, ngettext("%(n)d day", "%(n)d days", n) % {"n": n}) for n in (1, 3, 7, 14, 30)
            ],
        }
        template = "testaccess/test_access_list.html"
        if htmx_partial(request):
            template += "#test-access-table"
        return render(request, template, context)


class MemberTestAccessView(MemberActionView):
    """The member page's older grant action (its own URL, or `action=test-access` posted to the
    page): until a day, with the default profile."""

    action = "test-access"
    form_class = MemberTestAccessForm
    done = gettext_lazy("%(member)s has a test access now.")

    def run(self, member: Member, actor: Any, data: dict[str, Any]) -> None:
        member_test_access_grant(member=member, until=data["until"], actor=actor)
