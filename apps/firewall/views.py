"""Staff screens: firewall hosts at a glance, one host's health, pushes and versions."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views import View

from apps.accounts.roles import StaffRequiredMixin
from apps.firewall.models import FirewallHost
from apps.firewall.selectors import host_push_log, host_versions, version_diff
from apps.health.selectors import firewall_host_states, host_health_series
from apps.health.services import host_warnings


class FirewallHostListView(StaffRequiredMixin, View):
    """Every firewall with push state, loaded version, health and warnings; refreshes itself."""

    def get(self, request: HttpRequest) -> HttpResponse:
        template = "firewall/host_list.html"
        if request.htmx and not request.htmx.boosted:
            template += "#host-table"
        return render(request, template, {"states": firewall_host_states()})


class FirewallHostDetailView(StaffRequiredMixin, View):
    """One host: warnings, health charts, push log and stored versions."""

    def get(self, request: HttpRequest, name: str) -> HttpResponse:
        host = get_object_or_404(FirewallHost, name=name)
        sample = host.health_samples.first()
        log_page = Paginator(host_push_log(host=host), 25).get_page(request.GET.get("log"))
        versions = host_versions(host=host)[:50]
        context = {
            "host": host,
            "sample": sample,
            "warnings": host_warnings(host=host, sample=sample),
            "series": host_health_series(host=host),
            "log_page": log_page,
            "versions": versions,
        }
        return render(request, "firewall/host_detail.html", context)


class VersionDiffView(StaffRequiredMixin, View):
    """The difference between two stored versions of one host."""

    def get(self, request: HttpRequest, name: str) -> HttpResponse:
        host = get_object_or_404(FirewallHost, name=name)
        try:
            old_id, new_id = int(request.GET["a"]), int(request.GET["b"])
        except (KeyError, ValueError):
            raise Http404("two version numbers (a, b) are needed") from None
        old = get_object_or_404(host.versions, pk=old_id)
        new = get_object_or_404(host.versions, pk=new_id)
        lines = version_diff(old=old, new=new)
        context = {"host": host, "old": old, "new": new, "lines": list(lines) if lines else None}
        return render(request, "firewall/version_diff.html", context)
