"""Staff screens: firewall hosts at a glance, one host's health, pushes and versions."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views import View

from apps.accounts.roles import Role, RoleRequiredMixin, StaffRequiredMixin, has_role
from apps.audit.selectors import audit_for_object
from apps.core.htmx import htmx_partial
from apps.firewall.extensions import firewall_extensions
from apps.firewall.models import FirewallHost, Site
from apps.firewall.pipeline import push_request_outcome
from apps.firewall.selectors import host_push_log, host_versions, version_changes, version_diff
from apps.firewall.services import (
    PinRefused,
    firewall_push_now,
    host_pin,
    host_state_resync,
    host_unpin,
)
from apps.members.selectors import cause_members


class FirewallHostListView(StaffRequiredMixin, View):
    """Every firewall with push state, loaded version, health and warnings; refreshes itself."""

    def get(self, request: HttpRequest) -> HttpResponse:
        template = "firewall/host_list.html"
        if htmx_partial(request):
            template += "#host-table"
        push = request.GET.get("push", "")
        context = {
            "sites": Site.objects.filter(hosts__isnull=False)
            .distinct()
            .prefetch_related("buildings"),
            "push_request": push if push.isalnum() else "",
        }
        for extension in firewall_extensions():  # health: each host's state and warnings
            context.update(extension.host_list_context())
        return render(request, template, context)


class FirewallHostDetailView(StaffRequiredMixin, View):
    """One host: warnings, health charts, push log and stored versions."""

    def get(self, request: HttpRequest, name: str) -> HttpResponse:
        host = get_object_or_404(FirewallHost, name=name)
        log_page = Paginator(host_push_log(host=host), 25).get_page(request.GET.get("log"))
        versions = list(host_versions(host=host)[:50])
        context = {
            "host": host,
            "log_page": log_page,
            "versions": versions,
            "cause_members": cause_members(v.cause for v in versions),
            "audit": Paginator(audit_for_object(obj=host), 20).get_page(
                request.GET.get("audit_page")
            ),
            "can_push": has_role(request.user, Role.ADMIN),
        }
        for extension in firewall_extensions():  # health: sample, warnings, charts, quota hits
            context.update(extension.host_detail_context(host=host))
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
        pending = [v.pk for v in (old, new) if v.texts_pending and not v.applied_as_increment]
        increments = [v.pk for v in (old, new) if v.applied_as_increment]
        sections = None if pending or increments else version_diff(old=old, new=new)
        context = {
            "host": host,
            "old": old,
            "new": new,
            "sections": sections,
            "pending": pending,
            "increments": increments,
        }
        return render(request, "firewall/version_diff.html", context)


class PushNowView(RoleRequiredMixin, View):
    """Admins: compile and roll out every site now (audited); the list then shows the outcome."""

    required_roles = (Role.ADMIN,)

    def post(self, request: HttpRequest) -> HttpResponse:
        request_id = firewall_push_now(actor=request.user)
        return redirect(f"{reverse('firewall:host_list')}?push={request_id}")


class PushOutcomeView(RoleRequiredMixin, View):
    """The outcome of one "push now", per site; polled by the host list until every site ran."""

    required_roles = (Role.ADMIN,)

    def get(self, request: HttpRequest, request_id: str) -> HttpResponse:
        return render(
            request,
            "firewall/partials/push_outcome.html",
            {"request_id": request_id, "outcome": push_request_outcome(request_id)},
        )


def _pin_target(host: FirewallHost, raw: str | None):  # -> RuleSetVersion
    try:
        return host.versions.defer("nft_text", "tc_text").get(pk=int(raw or ""))
    except (ValueError, host.versions.model.DoesNotExist):
        raise Http404("no such version of this host") from None


class RollbackView(RoleRequiredMixin, View):
    """Admins: put a stored version back on one host and hold it there. GET asks for
    confirmation and names what will change; POST pins (audited)."""

    required_roles = (Role.ADMIN,)

    def get(self, request: HttpRequest, name: str) -> HttpResponse:
        host = get_object_or_404(FirewallHost, name=name)
        version = _pin_target(host, request.GET.get("version"))
        running = host.applied_version
        context = {
            "host": host,
            "version": version,
            "running": running,
            "cause_members": cause_members([version.cause]),
            "changes": (
                version_changes(old=running, new=version)
                if running and not version.applied_as_increment
                else None
            ),
        }
        return render(request, "firewall/rollback_confirm.html", context)

    def post(self, request: HttpRequest, name: str) -> HttpResponse:
        host = get_object_or_404(FirewallHost, name=name)
        version = _pin_target(host, request.POST.get("version"))
        try:
            host_pin(host=host, version=version, actor=request.user)
        except PinRefused as exc:  # its texts are not stored (yet): nothing was changed
            messages.error(request, str(exc))
            return redirect("firewall:host_detail", name=host.name)
        messages.success(
            request,
            _(
                "Version #%(n)s is being put back on %(host)s. The host stays on it until "
                "someone unpins it."
            )
            % {"n": version.pk, "host": host.name},
        )
        return redirect("firewall:host_detail", name=host.name)


class UnpinView(RoleRequiredMixin, View):
    """Admins: release a pinned host; its site pushes the newest version (audited)."""

    required_roles = (Role.ADMIN,)

    def post(self, request: HttpRequest, name: str) -> HttpResponse:
        host = get_object_or_404(FirewallHost, name=name)
        host_unpin(host=host, actor=request.user)
        messages.success(
            request,
            _("%(host)s is no longer pinned; the newest version is on its way.")
            % {"host": host.name},
        )
        return redirect("firewall:host_detail", name=host.name)


class StateResyncView(RoleRequiredMixin, View):
    """Admins: the host asks its peer's conntrackd for every connection state again (audited)."""

    required_roles = (Role.ADMIN,)

    def post(self, request: HttpRequest, name: str) -> HttpResponse:
        host = get_object_or_404(FirewallHost, name=name)
        try:
            host_state_resync(host=host, actor=request.user)
        except ValueError as exc:
            messages.error(request, _("Resync failed: %(error)s") % {"error": exc})
        else:
            messages.success(
                request,
                _("%(host)s asked its peer for every connection state again.")
                % {"host": host.name},
            )
        return redirect("firewall:host_detail", name=host.name)
