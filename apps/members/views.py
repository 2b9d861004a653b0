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
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views import View

from apps.accounts.roles import (
    StaffOr404Mixin,
    StaffRequiredMixin,
    user_roles,
)
from apps.audit.selectors import audit_for_member
from apps.core.actions import action_field_dispatch
from apps.core.errors import NetworkError
from apps.core.htmx import htmx_partial
from apps.members import forms as member_forms
from apps.members import services
from apps.members.extensions import member_extensions
from apps.members.models import Member
from apps.members.privacy import member_data_export
from apps.members.selectors import (
    SEARCH_ALL_LIMIT,
    SEARCH_LIMIT,
    member_get,
    member_history,
    member_of_user,
    member_search,
    pending_queue,
    search_kind,
)


def member_page_context(*, request: HttpRequest, member: Member) -> dict[str, Any]:
    """The sections the apps built on members add to the member page and the dashboard
    (network: devices, forwards, openings; testaccess: its panel, for staff)."""
    context: dict[str, Any] = {}
    for extension in member_extensions():
        context.update(extension.member_page_context(request=request, member=member))
    return context


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
            context.update(member_page_context(request=request, member=member))
            for extension in member_extensions():
                context.update(extension.dashboard_context(request=request, member=member))
        return render(request, "members/dashboard.html", context)


class OfficeHoursView(StaffRequiredMixin, View):
    """One search box for the queue at the desk, and the pending check-ins."""

    def get(self, request: HttpRequest) -> HttpResponse:
        query = request.GET.get("q", "")
        show_all = request.GET.get("all") == "1"
        limit = SEARCH_ALL_LIMIT if show_all else SEARCH_LIMIT
        # One more than is shown, to know whether there are more.
        results = member_search(actor=request.user, query=query, limit=limit + 1)
        more = len(results) > limit
        total = len(results[:limit])
        if more and not show_all:
            # How many there are (up to the "show all" bound): the desk is told, not cut off.
            everyone = member_search(actor=request.user, query=query, limit=SEARCH_ALL_LIMIT + 1)
            total = min(len(everyone), SEARCH_ALL_LIMIT)
            more_than_all = len(everyone) > SEARCH_ALL_LIMIT
        else:
            more_than_all = more
        template = "members/office_hours.html"
        context: dict[str, Any] = {
            "query": query.strip(),
            "kind": search_kind(query),
            "results": results[:limit],
            "more_results": more,
            "show_all": show_all,
            "total_results": total,
            "more_than_all": more_than_all,
            "search_limit": limit,
        }
        for extension in member_extensions():
            context.update(
                extension.office_hours_context(
                    request=request, kind=context["kind"], query=context["query"]
                )
            )
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


def member_action_forms(member: Member) -> dict[str, forms.Form]:
    """The unbound forms of the member page's actions (the page, and its Actions section
    rendered again after a change of status elsewhere on the page)."""
    return {
        "check_in": member_forms.CheckInForm(),
        "suspend": member_forms.SuspendForm(),
        "move": member_forms.MoveForm(),
        "end": member_forms.EndForm(),
        "contact": member_forms.ContactForm(
            initial={"email": member.user.email, "phone": member.phone}
        ),
    }


class MemberPage(StaffOr404Mixin, View):
    """The member page's parts shared by the page and its actions."""

    template = "members/member_detail.html"

    def _member(self, request: HttpRequest, pk: int) -> Member:
        try:
            return member_get(actor=request.user, pk=pk)
        except Member.DoesNotExist:
            raise Http404 from None

    def _render(
        self, request: HttpRequest, member: Member, bound: dict[str, forms.Form] | None = None
    ) -> HttpResponse:
        action_forms = member_action_forms(member)
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
            **member_page_context(request=request, member=member),
        }
        for extension in member_extensions():
            context.update(extension.staff_member_context(request=request, member=member))
        status = 422 if bound else 200
        return render(request, self.template, context, status=status)


class MemberActionView(MemberPage):
    """One office-hours action on a member, POSTed to its own URL: the subclasses name the form
    and run the service. Done: back to the page (or the desk); refused: the page with the form."""

    action: str  # the form's key on the page, and its name in an older form's `action` field
    form_class: type[forms.Form]
    done: Promise  # the success message; %(member)s is the member
    confirm_box: str = ""  # the box that confirms an action with consequences (refused without)

    def run(self, member: Member, actor: Any, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def make_form(self, data: Any, member: Member) -> forms.Form:
        return self.form_class(data)

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        """A reload (or a link on a refused form's page) shows the page itself."""
        query = request.META.get("QUERY_STRING", "")
        return redirect(
            reverse("members:member_detail", args=[pk]) + (f"?{query}" if query else "")
        )

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        member = self._member(request, pk)
        key = self.action.replace("-", "_")
        form = self.make_form(request.POST, member)
        if not form.is_valid():
            box = self.confirm_box
            if box in form.errors:  # said at the top too: the form may be far down the page
                messages.error(request, " ".join(form.errors[box]))
            return self._render(request, member, {key: form})
        try:
            self.run(member, request.user, form.cleaned_data)
        except NetworkError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            return self._render(request, member, {key: form})
        messages.success(request, str(self.done) % {"member": member})
        if request.POST.get("next") == "office-hours":
            return redirect("members:office_hours")
        return redirect("members:member_detail", pk=member.pk)


class MemberCheckInView(MemberActionView):
    action = "check-in"
    form_class = member_forms.CheckInForm
    done = gettext_lazy("%(member)s is checked in and active.")
    confirm_box = "identity_checked"

    def run(self, member: Member, actor: Any, data: dict[str, Any]) -> None:
        services.member_check_in(member=member, actor=actor)


class MemberSuspendView(MemberActionView):
    action = "suspend"
    form_class = member_forms.SuspendForm
    done = gettext_lazy("%(member)s is suspended.")

    def run(self, member: Member, actor: Any, data: dict[str, Any]) -> None:
        services.member_suspend(member=member, reason=data["reason"], actor=actor)


class MemberMoveView(MemberActionView):
    action = "move"
    form_class = member_forms.MoveForm
    done = gettext_lazy("%(member)s moved; the devices have their new addresses.")

    def make_form(self, data: Any, member: Member) -> forms.Form:
        return member_forms.MoveForm(data, member=member)

    def run(self, member: Member, actor: Any, data: dict[str, Any]) -> None:
        services.member_move(member=member, room=data["room"], actor=actor)


class MemberEndView(MemberActionView):
    action = "end"
    form_class = member_forms.EndForm
    done = gettext_lazy("The membership of %(member)s has ended.")
    confirm_box = "confirm"

    def run(self, member: Member, actor: Any, data: dict[str, Any]) -> None:
        services.member_end(member=member, note=data["note"], actor=actor)


class MemberContactView(MemberActionView):
    action = "contact"
    form_class = member_forms.ContactForm
    done = gettext_lazy("Contact data of %(member)s saved.")

    def run(self, member: Member, actor: Any, data: dict[str, Any]) -> None:
        services.member_update_contact(
            member=member, email=data["email"], phone=data["phone"], actor=actor
        )


MEMBER_ACTION_VIEWS = (
    MemberCheckInView,
    MemberSuspendView,
    MemberMoveView,
    MemberEndView,
    MemberContactView,
)


class MemberDetailView(MemberPage):
    """Everything about one member, with every office-hours action (plain forms, keyboard first;
    each form posts to its action's own view)."""

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return self._render(request, self._member(request, pk))

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        """A form that names its action in an `action` field (as before the per-action URLs)."""
        views = [*MEMBER_ACTION_VIEWS]
        for extension in member_extensions():
            views += extension.member_action_views()
        return action_field_dispatch(request, views, pk=pk)


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
