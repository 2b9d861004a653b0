"""The "This device is not registered" page of the walled garden, and the captive-portal API
(RFC 8908) that tells the device's OS to show it."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views import View

from apps.accounts.throttle import throttle_hit
from apps.core.clientip import client_address
from apps.dhcp.models import DhcpSettings, Lease
from apps.dhcp.walled import unregistered_address
from apps.network.errors import NetworkError
from apps.network.forms import DeviceForm
from apps.network.models import Device
from apps.network.services import device_add
from workers.ruleset.snapshot import CaptivePortalUrl

CAPTIVE_CONTENT_TYPE = "application/captive+json"


def lease_mac(address: str) -> str | None:
    """The MAC holding `address` now, from the lease history the collector keeps (every
    PORTAL_DHCP_LEASE_INTERVAL seconds). Never a read of the hosts: this runs for anonymous
    requests, and a device with a static address in the range would otherwise tie up web
    workers and the firewalls' management plane with an SSH round per request."""
    return (
        Lease.objects.filter(address=address, ends__gte=timezone.now())
        .order_by("-starts")
        .values_list("mac", flat=True)
        .first()
    )


class UnregisteredView(View):
    """Shown to every request from a registration range; signed-in members register the device
    (its MAC read from the lease) and it gets its address at its next renew."""

    template = "dhcp/unregistered.html"

    def context(self, request: HttpRequest, form: DeviceForm | None = None) -> dict:
        address = unregistered_address(request)
        mac = lease_mac(address) if address else None
        known = Device.objects.select_related("member").filter(mac=mac).first() if mac else None
        member = getattr(request.user, "member", None) if request.user.is_authenticated else None
        if form is None:
            form = DeviceForm(initial={"mac": mac or ""})
        return {
            "address": address,
            "mac": mac,
            "known": known,
            "member": member,
            "form": form,
            "lease_interval": settings.PORTAL_DHCP_LEASE_INTERVAL,
            "renew_seconds": DhcpSettings.objects.filter(id=1)
            .values_list("registration_lease_seconds", flat=True)
            .first()
            or 120,
        }

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(request, self.template, self.context(request))

    def post(self, request: HttpRequest) -> HttpResponse:
        if not request.user.is_authenticated or getattr(request.user, "member", None) is None:
            messages.error(request, _("Sign in as the member whose device this is."))
            return redirect("dhcp:unregistered")
        form = DeviceForm(request.POST)
        if form.is_valid():
            try:
                device = device_add(
                    member=request.user.member,
                    name=form.cleaned_data["name"],
                    mac=form.cleaned_data["mac"],
                    actor=request.user,
                )
            except NetworkError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                messages.success(
                    request,
                    _(
                        "“%(name)s” is registered with %(ipv4)s. It gets this address when it "
                        "renews its lease; reconnect it (Wi-Fi off and on, or unplug the cable) "
                        "to have it at once."
                    )
                    % {"name": device.name, "ipv4": device.ipv4},
                )
                return redirect("dhcp:unregistered")
        return render(request, self.template, self.context(request, form), status=400)


class CaptivePortalApiView(View):
    """RFC 8908: ``{"captive": true, "user-portal-url": ...}`` while the asking device holds a
    lease from a registration range (the firewall walls exactly those addresses), else
    ``{"captive": false}``. A device registered from the walled garden stays captive until it
    renews onto its reserved address, which is also when its traffic is let through.

    Anonymous, read-only, no database write; limited per client address
    (PORTAL_THROTTLE_RATES["captive_api"], then 429 with Retry-After)."""

    def get(self, request: HttpRequest) -> HttpResponse:
        address = client_address(request)
        if wait := throttle_hit("captive_api", f"ip:{address}"):
            response = JsonResponse(
                {"error": "too many requests"}, status=429, content_type=CAPTIVE_CONTENT_TYPE
            )
            response["Retry-After"] = str(wait)
            return response
        body: dict[str, object] = {"captive": False}
        if unregistered_address(request):
            body = {"captive": True, "user-portal-url": self.user_portal_url(request)}
        response = JsonResponse(body, content_type=CAPTIVE_CONTENT_TYPE)
        # RFC 8908 section 5: the answer belongs to this client and changes when it registers.
        response["Cache-Control"] = "private, no-store"
        return response

    @staticmethod
    def user_portal_url(request: HttpRequest) -> str:
        """The "not registered" page on the configured portal origin (never the Host header a
        walled device sent); without a configured URL, on the host this request came to."""
        page = reverse("dhcp:unregistered")
        configured = (
            DhcpSettings.objects.filter(id=1).values_list("captive_portal_url", flat=True).first()
        )
        if configured:
            return CaptivePortalUrl(configured).origin + page
        return request.build_absolute_uri(page)
