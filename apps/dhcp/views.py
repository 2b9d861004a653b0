"""The "This device is not registered" page of the walled garden."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views import View

from apps.dhcp.models import DhcpSettings, Lease
from apps.dhcp.walled import unregistered_address
from apps.network.errors import NetworkError
from apps.network.forms import DeviceForm
from apps.network.models import Device
from apps.network.services import device_add


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
