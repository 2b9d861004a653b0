"""Staff screens: firewall hosts at a glance, one host's health, pushes and versions."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views import View

from apps.accounts.roles import Role, RoleRequiredMixin, StaffRequiredMixin, has_role
from apps.audit.selectors import audit_for_object
from apps.firewall.models import FirewallHost
from apps.firewall.selectors import host_push_log, host_versions, version_diff
from apps.firewall.services import firewall_push_now, host_rollback_request
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
            "audit": Paginator(audit_for_object(obj=host), 20).get_page(
                request.GET.get("audit_page")
            ),
            "can_push": has_role(request.user, Role.ADMIN),
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


class PushNowView(RoleRequiredMixin, View):
    """Admins: compile and roll out now (audited)."""

    required_roles = (Role.ADMIN,)

    def post(self, request: HttpRequest) -> HttpResponse:
        firewall_push_now(actor=request.user)
        messages.success(request, _("A push to every firewall is on its way."))
        return redirect("firewall:host_list")


class RollbackView(RoleRequiredMixin, View):
    """Admins: put a stored version back on one host (audited)."""

    required_roles = (Role.ADMIN,)

    def post(self, request: HttpRequest, name: str) -> HttpResponse:
        host = get_object_or_404(FirewallHost, name=name)
        try:
            version = host.versions.defer("nft_text", "tc_text").get(
                pk=int(request.POST["version"])
            )
        except (KeyError, ValueError, host.versions.model.DoesNotExist):
            raise Http404("no such version of this host") from None
        host_rollback_request(host=host, version=version, actor=request.user)
        messages.success(
            request,
            _("Version #%(n)s is being put back on %(host)s.")
            % {"n": version.pk, "host": host.name},
        )
        return redirect("firewall:host_detail", name=host.name)
