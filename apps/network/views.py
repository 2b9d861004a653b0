"""Device add / rename / remove, inline with htmx on the dashboard and the member page."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views import View

from apps.accounts.roles import STAFF_ROLES, has_role
from apps.members.models import Member
from apps.members.selectors import member_devices, member_get
from apps.network.errors import NetworkError
from apps.network.forms import DeviceForm
from apps.network.models import Device, NetworkSettings
from apps.network.services import device_add, device_change, device_remove


def devices_context(
    *,
    request: HttpRequest,
    member: Member,
    form: DeviceForm | None = None,
    editing: int | None = None,
    edit_form: DeviceForm | None = None,
    notice: str = "",
) -> dict[str, Any]:
    """What the devices section needs (the same on the dashboard and the member page)."""
    devices = list(member_devices(actor=request.user, member=member))
    limit = NetworkSettings.load().device_limit
    return {
        "member": member,
        "devices": devices,
        "device_form": form or DeviceForm(),
        "editing": editing,
        "edit_form": edit_form,
        "device_limit": limit,
        "can_add_device": len(devices) < limit and not member.is_ended,
        "notice": notice,
    }


def _member_or_404(request: HttpRequest, pk: int) -> Member:
    try:
        return member_get(actor=request.user, pk=pk)
    except Member.DoesNotExist:
        raise Http404 from None


def _device_or_404(request: HttpRequest, pk: int) -> Device:
    try:
        return Device.objects.visible_to(request.user).select_related("member").get(pk=pk)
    except Device.DoesNotExist:
        raise Http404 from None


def _section(request: HttpRequest, member: Member, **kwargs: Any) -> HttpResponse:
    """The devices section for htmx; a redirect to the page it lives on otherwise."""
    if request.htmx:
        context = devices_context(request=request, member=member, **kwargs)
        return render(request, "network/partials/devices.html", context)
    if has_role(request.user, *STAFF_ROLES):
        return redirect("members:member_detail", pk=member.pk)
    return redirect(reverse("members:dashboard") + "#devices")


class DeviceSectionView(LoginRequiredMixin, View):
    """GET: the devices section again (cancel an edit)."""

    def get(self, request: HttpRequest, member_pk: int) -> HttpResponse:
        return _section(request, _member_or_404(request, member_pk))


class DeviceAddView(LoginRequiredMixin, View):
    """POST name + MAC: register a device for the member (residents: only themselves)."""

    def post(self, request: HttpRequest, member_pk: int) -> HttpResponse:
        member = _member_or_404(request, member_pk)
        form = DeviceForm(request.POST)
        if form.is_valid():
            try:
                device = device_add(
                    member=member,
                    name=form.cleaned_data["name"],
                    mac=form.cleaned_data["mac"],
                    actor=request.user,
                )
            except NetworkError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                if request.htmx:
                    return _section(request, member, notice=_added(device))
                messages.success(request, _added(device))
                return _section(request, member)
        if not request.htmx:
            for error in form.errors.values():
                messages.error(request, " ".join(error))
        return _section(request, member, form=form)


def _added(device: Device) -> str:
    from django.utils.translation import gettext as _

    return _("Device “%(name)s” added: %(ipv4)s.") % {"name": device.name, "ipv4": device.ipv4}


class DeviceEditView(LoginRequiredMixin, View):
    """GET: the row as a form; POST: rename it or change its MAC."""

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        device = _device_or_404(request, pk)
        form = DeviceForm(initial={"name": device.name, "mac": device.mac})
        return _section(request, device.member, editing=device.pk, edit_form=form)

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        device = _device_or_404(request, pk)
        form = DeviceForm(request.POST)
        if form.is_valid():
            try:
                device_change(
                    device=device,
                    name=form.cleaned_data["name"],
                    mac=form.cleaned_data["mac"],
                    actor=request.user,
                )
            except NetworkError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                return _section(request, device.member)
        return _section(request, device.member, editing=device.pk, edit_form=form)


class DeviceRemoveView(LoginRequiredMixin, View):
    """POST: remove the device."""

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        device = _device_or_404(request, pk)
        member = device.member
        device_remove(device=device, actor=request.user)
        return _section(request, member)
