"""Member-facing and office-hours pages: thin views over selectors and services."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views import View

from apps.accounts.roles import (
    StaffOr404Mixin,
    StaffRequiredMixin,
    user_roles,
)
from apps.audit.selectors import audit_for_member
from apps.core.htmx import htmx_partial
from apps.dhcp.selectors import lease_search, unknown_devices_near
from apps.members import forms as member_forms
from apps.members import services
from apps.members.models import Member
from apps.members.privacy import member_data_export
from apps.members.selectors import (
    SEARCH_LIMIT,
    member_get,
    member_history,
    member_of_user,
    member_search,
    pending_queue,
    search_kind,
)
from apps.network.errors import NetworkError
from apps.network.views import devices_context
from apps.notifications.selectors import notice_list


class DashboardView(LoginRequiredMixin, View):
    """A resident's own account: status, room, addresses and devices."""

    def get(self, request: HttpRequest) -> HttpResponse:
        member = member_of_user(user=request.user)
        context: dict[str, Any] = {
            "roles": sorted(user_roles(request.user)),
            "member": member,
            "former_member_days": settings.PORTAL_RETAIN_FORMER_MEMBERS_DAYS,
        }
        if member is not None:
            context.update(devices_context(request=request, member=member))
            context["recent_notices"] = list(notice_list(actor=request.user)[:3])
        return render(request, "members/dashboard.html", context)


class OfficeHoursView(StaffRequiredMixin, View):
    """One search box for the queue at the desk, and the pending check-ins."""

    def get(self, request: HttpRequest) -> HttpResponse:
        query = request.GET.get("q", "")
        # One more than is shown, to say "showing the first N" only when there are more.
        results = member_search(actor=request.user, query=query, limit=SEARCH_LIMIT + 1)
        template = "members/office_hours.html"
        context: dict[str, Any] = {
            "query": query.strip(),
            "kind": search_kind(query),
            "results": results[:SEARCH_LIMIT],
            "leases": lease_search(kind=search_kind(query), query=query.strip()),
            "more_results": len(results) > SEARCH_LIMIT,
            "search_limit": SEARCH_LIMIT,
        }
        if htmx_partial(request):
            target = request.htmx.target or "search-results"
            if target == "pending-queue":
                context["pending"] = self._pending(request)
                return render(request, template + "#pending-queue", context)
            return render(request, template + "#search-results", context)
        context["pending"] = self._pending(request)
        return render(request, template, context)

    def _pending(self, request: HttpRequest) -> Any:
        return Paginator(pending_queue(actor=request.user), 20).get_page(request.GET.get("page"))


ACTIONS: dict[str, tuple[type[forms.Form] | None, Any]] = {
    "check-in": (
        member_forms.CheckInForm,
        lambda m, a, d: services.member_check_in(member=m, actor=a),
    ),
    "test-access": (
        member_forms.TestAccessForm,
        lambda m, a, d: services.member_test_access_grant(member=m, until=d["until"], actor=a),
    ),
    "suspend": (
        member_forms.SuspendForm,
        lambda m, a, d: services.member_suspend(member=m, reason=d["reason"], actor=a),
    ),
    "move": (
        member_forms.MoveForm,
        lambda m, a, d: services.member_move(member=m, room=d["room"], actor=a),
    ),
    "end": (
        member_forms.EndForm,
        lambda m, a, d: services.member_end(member=m, note=d["note"], actor=a),
    ),
    "contact": (
        member_forms.ContactForm,
        lambda m, a, d: services.member_update_contact(
            member=m, email=d["email"], phone=d["phone"], actor=a
        ),
    ),
}


# The box that confirms an action with consequences; the server refuses the action without it.
CONFIRM_BOXES = {"check-in": "identity_checked", "end": "confirm"}


def _done_message(action: str, member: Member) -> str:
    texts = {
        "check-in": _("%(member)s is checked in and active."),
        "test-access": _("%(member)s has a test access now."),
        "suspend": _("%(member)s is suspended."),
        "move": _("%(member)s moved; the devices have their new addresses."),
        "end": _("The membership of %(member)s has ended."),
        "contact": _("Contact data of %(member)s saved."),
    }
    return texts[action] % {"member": member}


class MemberDetailView(StaffOr404Mixin, View):
    """Everything about one member, with every office-hours action (plain forms, keyboard first)."""

    template = "members/member_detail.html"

    def _member(self, request: HttpRequest, pk: int) -> Member:
        try:
            return member_get(actor=request.user, pk=pk)
        except Member.DoesNotExist:
            raise Http404 from None

    def _render(
        self, request: HttpRequest, member: Member, bound: dict[str, forms.Form] | None = None
    ) -> HttpResponse:
        action_forms = {
            "check_in": member_forms.CheckInForm(),
            "test_access": member_forms.TestAccessForm(),
            "suspend": member_forms.SuspendForm(),
            "move": member_forms.MoveForm(),
            "end": member_forms.EndForm(),
            "contact": member_forms.ContactForm(
                initial={"email": member.user.email, "phone": member.phone}
            ),
        }
        action_forms.update(bound or {})
        audit = Paginator(audit_for_member(member=member).select_related("actor"), 25).get_page(
            request.GET.get("audit_page")
        )
        context = {
            "member": member,
            "forms": action_forms,
            "audit": audit,
            "open_action": next(iter(bound or {}), ""),
            **member_history(member=member),
            **devices_context(request=request, member=member),
            "unknown_devices": unknown_devices_near(
                building_id=member.room.building_id if member.room_id else None
            )
            if not member.is_ended
            else [],
        }
        status = 422 if bound else 200
        return render(request, self.template, context, status=status)

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return self._render(request, self._member(request, pk))

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        member = self._member(request, pk)
        action = request.POST.get("action", "")
        if action not in ACTIONS:
            raise Http404
        form_class, run = ACTIONS[action]
        key = action.replace("-", "_")
        form = form_class(request.POST) if form_class else None
        if form is not None and not form.is_valid():
            box = CONFIRM_BOXES.get(action)
            if box in form.errors:  # said at the top too: the form may be far down the page
                messages.error(request, " ".join(form.errors[box]))
            return self._render(request, member, {key: form})
        try:
            run(member, request.user, form.cleaned_data if form else {})
        except NetworkError as exc:
            if form is not None:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
                return self._render(request, member, {key: form})
            messages.error(request, exc.message)
        else:
            messages.success(request, _done_message(action, member))
        if request.POST.get("next") == "office-hours":
            return redirect("members:office_hours")
        return redirect("members:member_detail", pk=member.pk)


class MemberRegisterView(StaffRequiredMixin, View):
    """Register a new member at the desk (pending until checked in)."""

    template = "members/member_form.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(request, self.template, {"form": member_forms.RegisterForm()})

    def post(self, request: HttpRequest) -> HttpResponse:
        form = member_forms.RegisterForm(request.POST)
        if form.is_valid():
            try:
                member = services.member_register(actor=request.user, **form.cleaned_data)
            except NetworkError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                messages.success(
                    request,
                    _("%(member)s is registered and waits for check-in.") % {"member": member},
                )
                return redirect("members:member_detail", pk=member.pk)
        return render(request, self.template, {"form": form}, status=422)


class MemberDataView(LoginRequiredMixin, View):
    """The signed-in member's own data as a JSON download (apps/members/privacy.py)."""

    def get(self, request: HttpRequest) -> HttpResponse:
        member = member_of_user(user=request.user)
        if member is None:
            raise Http404
        data = member_data_export(member=member, actor=request.user)
        response = JsonResponse(data, json_dumps_params={"indent": 2, "ensure_ascii": False})
        stamp = timezone.localdate().isoformat()
        response["Content-Disposition"] = f'attachment; filename="my-portal-data-{stamp}.json"'
        response["Cache-Control"] = "no-store"
        return response
