"""Member-facing and office-hours pages."""

from __future__ import annotations

from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views import View

from apps.accounts.roles import StaffRequiredMixin, user_roles
from apps.members.selectors import person_search


class DashboardView(LoginRequiredMixin, View):
    """A resident's own account page."""

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(
            request,
            "members/dashboard.html",
            {"roles": sorted(user_roles(request.user))},
        )


class OfficeHoursView(StaffRequiredMixin, View):
    """One search box for the queue at the desk; results update as the volunteer types."""

    def get(self, request: HttpRequest) -> HttpResponse:
        query = request.GET.get("q", "")
        results = person_search(actor=request.user, query=query)
        template = "members/office_hours.html"
        if request.htmx and not request.htmx.boosted:
            template += "#search-results"
        return render(request, template, {"query": query, "results": results})
