"""The Alertmanager webhook, and what the staff do with alert groups."""

from __future__ import annotations

import hmac

import structlog
from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _
from django.views import View
from django.views.decorators.csrf import csrf_exempt

from apps.accounts.roles import StaffRequiredMixin
from apps.alerts import services
from apps.alerts.models import AlertGroup
from apps.alerts.payload import AlertPayloadError, alerts_parse

log = structlog.get_logger(__name__)
MAX_BODY = 4 * 1024 * 1024


def _authorised(request: HttpRequest) -> bool:
    """The shared secret (PORTAL_ALERTS_WEBHOOK_SECRET) as a bearer token; no secret set: no
    one is let in."""
    secret = settings.PORTAL_ALERTS_WEBHOOK_SECRET
    given = request.headers.get("Authorization", "")
    if not secret or not given.startswith("Bearer "):
        return False
    return hmac.compare_digest(given.removeprefix("Bearer ").encode(), secret.encode())


def _refuse(request: HttpRequest, status: int, reason: str) -> JsonResponse:
    log.warning(
        "alerts.webhook_refused", status=status, reason=reason, remote=request.META["REMOTE_ADDR"]
    )
    return JsonResponse({"error": reason}, status=status)


@method_decorator(csrf_exempt, name="dispatch")
class AlertWebhookView(View):
    """POST /alerts/webhook: Alertmanager's webhook_config (version 4 messages)."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest) -> HttpResponse:
        if not _authorised(request):
            return _refuse(request, 401, "not authorised")
        if int(request.META.get("CONTENT_LENGTH") or 0) > MAX_BODY:
            return _refuse(request, 413, "body too large")
        try:
            alerts = alerts_parse(request.body)
        except AlertPayloadError as exc:
            return _refuse(request, 400, str(exc))
        result = services.alerts_receive(alerts=alerts)
        log.info("alerts.webhook", alerts=result.alerts, opened=result.opened, joined=result.joined)
        return JsonResponse(
            {"alerts": result.alerts, "opened": result.opened, "joined": result.joined}
        )


class AlertGroupNotOutageView(StaffRequiredMixin, View):
    """A person says: this is not an outage."""

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        group = get_object_or_404(AlertGroup, pk=pk)
        incident_id = group.incident_id
        services.alert_group_not_outage(group=group, actor=request.user)
        messages.success(request, _("Marked as not an outage until the alert resolves."))
        if incident_id:
            return redirect("tickets:incident_detail", pk=incident_id)
        return redirect("firewall:host_list")


class AlertSubscriptionView(StaffRequiredMixin, View):
    """Mail me the staff warnings (or stop)."""

    def post(self, request: HttpRequest) -> HttpResponse:
        on = services.alert_subscription_set(user=request.user, on=request.POST.get("on") == "1")
        messages.success(
            request, _("You will be mailed warnings.") if on else _("No more warning mails.")
        )
        return redirect("firewall:host_list")
