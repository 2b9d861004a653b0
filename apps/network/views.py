"""Devices, port forwards and IPv6 openings inline with htmx on the dashboard and the member
page."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext
from django.views import View
from django_htmx.http import trigger_client_event

from apps.accounts.roles import STAFF_ROLES, has_role
from apps.core.htmx import htmx_partial
from apps.members.choices import NETWORKED_STATUSES
from apps.members.models import Member
from apps.members.selectors import member_get
from apps.network.errors import NetworkError
from apps.network.extensions import devices_shown, live_attach, live_hosts
from apps.network.forms import (
    DeviceForm,
    Ipv6OpeningForm,
    PortForwardForm,
)
from apps.network.models import Device, Ipv6Opening, NetworkSettings, PortForward
from apps.network.probe import ProbeRefused, forward_probe, opening_probe
from apps.network.selectors import (
    blocked_inbound,
    by_device,
    member_devices,
    member_ipv6_openings,
    member_port_forwards,
)
from apps.network.services import (
    device_add,
    device_change,
    device_remove,
    ipv6_opening_change,
    ipv6_opening_create,
    ipv6_opening_delete,
    member_can_forward,
    port_forward_change,
    port_forward_create,
    port_forward_delete,
)


def devices_context(
    *,
    request: HttpRequest,
    member: Member,
    form: DeviceForm | None = None,
    editing: int | None = None,
    edit_form: DeviceForm | None = None,
    notice: str = "",
    sections: bool = True,
) -> dict[str, Any]:
    """What the devices section needs (the same on the dashboard and the member page); with
    `sections`, also the forwards and openings sections of the whole page."""
    devices = list(member_devices(actor=request.user, member=member))
    net = NetworkSettings.load()
    limit = net.device_limit
    # Only a networked member's devices reach the firewalls (and so can be live there).
    devices_live = member.status in NETWORKED_STATUSES
    # One read of the hosts for the live states of every section of the page.
    hosts = live_hosts() if devices_live or sections else None
    if devices_live:
        live_attach(devices, hosts=hosts)
    devices_shown(devices)  # dhcp: each device's newest lease
    extra: dict[str, Any] = {}
    if sections:
        shared = {"devices": devices, "hosts": hosts, "net": net}
        extra.update(forwards_context(request=request, member=member, **shared))
        extra.update(openings_context(request=request, member=member, **shared))
    return {
        **extra,
        "member": member,
        "devices": devices,
        "devices_live": devices_live,
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
    if htmx_partial(request):
        context = devices_context(request=request, member=member, sections=False, **kwargs)
        response = render(request, "network/partials/devices.html", context)
        if request.method == "POST" and not kwargs.get("editing"):
            # Forwards and openings offer the devices (and lose those removed): refresh them.
            trigger_client_event(response, "devicesChanged")
        return response
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
                if htmx_partial(request):
                    return _section(request, member, notice=_added(device))
                messages.success(request, _added(device))
                return _section(request, member)
        if not htmx_partial(request):
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


# --- port forwards and IPv6 openings ----------------------------------------------------------


def forwards_context(
    *,
    request: HttpRequest,
    member: Member,
    devices: list[Device] | None = None,
    form: PortForwardForm | None = None,
    editing: int | None = None,
    edit_form: PortForwardForm | None = None,
    notice: str = "",
    hosts: Any = None,
    net: NetworkSettings | None = None,
) -> dict[str, Any]:
    """The port-forwards section: forwards grouped by device, the add form, the limit."""
    if devices is None:
        devices = list(member_devices(actor=request.user, member=member))
    forwards = list(member_port_forwards(actor=request.user, member=member))
    waiting = live_attach((f for f in forwards if f.enabled), hosts=hosts)
    limit = (net or NetworkSettings.load()).port_forward_limit
    usable = member_can_forward(member)
    choices = member_devices(actor=request.user, member=member)
    return {
        "member": member,
        "forward_groups": by_device(forwards, devices),
        "forward_count": len(forwards),
        "forward_limit": limit,
        "forward_left": max(0, limit - len(forwards)),
        "forward_form": form
        or PortForwardForm(devices=choices, shown=devices, initial={"protocol": "tcp"}),
        "forward_editing": editing,
        "forward_edit_form": edit_form,
        "forward_notice": notice,
        "forwards_waiting": waiting,
        "forwards_usable": usable,
        "can_add_forward": usable and bool(devices) and len(forwards) < limit,
        "has_devices": bool(devices),
        "blocked_inbound": list(blocked_inbound()),
        "probe_available": bool((net or NetworkSettings.load()).probe_address),
    }


def openings_context(
    *,
    request: HttpRequest,
    member: Member,
    devices: list[Device] | None = None,
    form: Ipv6OpeningForm | None = None,
    editing: int | None = None,
    edit_form: Ipv6OpeningForm | None = None,
    notice: str = "",
    hosts: Any = None,
    net: NetworkSettings | None = None,
) -> dict[str, Any]:
    """The IPv6-openings section: openings grouped by device, the add form, the limit."""
    if devices is None:
        devices = list(member_devices(actor=request.user, member=member))
    openings = list(member_ipv6_openings(actor=request.user, member=member))
    waiting = live_attach((o for o in openings if o.enabled), hosts=hosts)
    limit = (net or NetworkSettings.load()).ipv6_opening_limit
    usable = member_can_forward(member)
    with_ipv6 = [d for d in devices if d.ipv6]
    choices = member_devices(actor=request.user, member=member).exclude(ipv6__isnull=True)
    return {
        "probe_available": bool((net or NetworkSettings.load()).probe_address),
        "member": member,
        "opening_groups": by_device(openings, devices),
        "opening_count": len(openings),
        "opening_limit": limit,
        "opening_form": form
        or Ipv6OpeningForm(devices=choices, shown=with_ipv6, initial={"protocol": "tcp"}),
        "opening_editing": editing,
        "opening_edit_form": edit_form,
        "opening_notice": notice,
        "openings_waiting": waiting,
        "openings_usable": usable,
        "can_add_opening": usable and bool(with_ipv6) and len(openings) < limit,
        "has_ipv6_devices": bool(with_ipv6),
    }


def _redirect_to(request: HttpRequest, member: Member, anchor: str) -> HttpResponse:
    if has_role(request.user, *STAFF_ROLES):
        return redirect(reverse("members:member_detail", args=[member.pk]) + f"#{anchor}")
    return redirect(reverse("members:dashboard") + f"#{anchor}")


def _forwards_section(request: HttpRequest, member: Member, **kwargs: Any) -> HttpResponse:
    if htmx_partial(request):
        context = forwards_context(request=request, member=member, **kwargs)
        return render(request, "network/partials/forwards.html", context)
    return _redirect_to(request, member, "port-forwards")


def _openings_section(request: HttpRequest, member: Member, **kwargs: Any) -> HttpResponse:
    if htmx_partial(request):
        context = openings_context(request=request, member=member, **kwargs)
        return render(request, "network/partials/openings.html", context)
    return _redirect_to(request, member, "ipv6-openings")


def _forward_or_404(request: HttpRequest, pk: int) -> PortForward:
    try:
        return (
            PortForward.objects.visible_to(request.user)
            .select_related("member", "device")
            .get(pk=pk)
        )
    except PortForward.DoesNotExist:
        raise Http404 from None


def _opening_or_404(request: HttpRequest, pk: int) -> Ipv6Opening:
    try:
        return (
            Ipv6Opening.objects.visible_to(request.user).select_related("device__member").get(pk=pk)
        )
    except Ipv6Opening.DoesNotExist:
        raise Http404 from None


def _form_refused(request: HttpRequest, form: forms.Form, exc: NetworkError) -> None:
    form.add_error(exc.field if exc.field in form.fields else None, exc.message)
    if not htmx_partial(request):
        messages.error(request, exc.message)


def _form_errors_to_messages(request: HttpRequest, form: forms.Form) -> None:
    if not htmx_partial(request):
        for error in form.errors.values():
            messages.error(request, " ".join(error))


class ForwardSectionView(LoginRequiredMixin, View):
    """GET: the port-forwards section again (after a device change, or to cancel an edit)."""

    def get(self, request: HttpRequest, member_pk: int) -> HttpResponse:
        return _forwards_section(request, _member_or_404(request, member_pk))


class ForwardAddView(LoginRequiredMixin, View):
    """POST: a new forward for the member (residents: only themselves)."""

    def post(self, request: HttpRequest, member_pk: int) -> HttpResponse:
        member = _member_or_404(request, member_pk)
        form = PortForwardForm(
            request.POST, devices=member_devices(actor=request.user, member=member)
        )
        if form.is_valid():
            data = form.cleaned_data
            try:
                forward = port_forward_create(
                    member=member,
                    device=data["device"],
                    protocol=data["protocol"],
                    public_ports=data["public_ports"],
                    target_ports=data["target_ports"],
                    description=data["description"],
                    actor=request.user,
                )
            except NetworkError as exc:
                _form_refused(request, form, exc)
            else:
                notice = _forward_added(forward)
                if not htmx_partial(request):
                    messages.success(request, notice)
                return _forwards_section(request, member, notice=notice)
        _form_errors_to_messages(request, form)
        return _forwards_section(request, member, form=form)


def _forward_added(forward: PortForward) -> str:
    return gettext("Forward %(protocol)s %(ports)s → %(device)s added.") % {
        "protocol": forward.get_protocol_display(),
        "ports": forward.public_ports,
        "device": forward.device.name if forward.device else "—",
    }


class ForwardEditView(LoginRequiredMixin, View):
    """GET: the row as a form; POST: change the forward."""

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        forward = _forward_or_404(request, pk)
        form = PortForwardForm(
            devices=member_devices(actor=request.user, member=forward.member),
            initial={
                "device": forward.device_id,
                "protocol": forward.protocol,
                "public_ports": forward.public_ports,
                "target_ports": forward.target_ports,
                "description": forward.description,
            },
        )
        return _forwards_section(request, forward.member, editing=forward.pk, edit_form=form)

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        forward = _forward_or_404(request, pk)
        member = forward.member
        form = PortForwardForm(
            request.POST, devices=member_devices(actor=request.user, member=member)
        )
        if form.is_valid():
            data = form.cleaned_data
            try:
                port_forward_change(
                    forward=forward,
                    device=data["device"],
                    protocol=data["protocol"],
                    public_ports=data["public_ports"],
                    target_ports=data["target_ports"] or data["public_ports"],
                    description=data["description"],
                    actor=request.user,
                )
            except NetworkError as exc:
                _form_refused(request, form, exc)
            else:
                return _forwards_section(request, member, notice=gettext("Forward saved."))
        _form_errors_to_messages(request, form)
        return _forwards_section(request, member, editing=forward.pk, edit_form=form)


class ForwardToggleView(LoginRequiredMixin, View):
    """POST: enable or disable the forward (`enabled` = 1 or 0)."""

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        forward = _forward_or_404(request, pk)
        enabled = request.POST.get("enabled") == "1"
        try:
            port_forward_change(forward=forward, enabled=enabled, actor=request.user)
        except NetworkError as exc:
            if not htmx_partial(request):
                messages.error(request, exc.message)
            return _forwards_section(request, forward.member, notice=exc.message)
        notice = gettext("Forward enabled.") if enabled else gettext("Forward disabled.")
        return _forwards_section(request, forward.member, notice=notice)


class ForwardDeleteView(LoginRequiredMixin, View):
    """POST: delete the forward."""

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        forward = _forward_or_404(request, pk)
        member = forward.member
        port_forward_delete(forward=forward, actor=request.user)
        return _forwards_section(request, member, notice=gettext("Forward deleted."))


class OpeningSectionView(LoginRequiredMixin, View):
    """GET: the IPv6-openings section again."""

    def get(self, request: HttpRequest, member_pk: int) -> HttpResponse:
        return _openings_section(request, _member_or_404(request, member_pk))


def _opening_devices(request: HttpRequest, member: Member) -> Any:
    return member_devices(actor=request.user, member=member).exclude(ipv6__isnull=True)


class OpeningAddView(LoginRequiredMixin, View):
    """POST: a new IPv6 opening for one of the member's devices."""

    def post(self, request: HttpRequest, member_pk: int) -> HttpResponse:
        member = _member_or_404(request, member_pk)
        form = Ipv6OpeningForm(request.POST, devices=_opening_devices(request, member))
        if form.is_valid():
            data = form.cleaned_data
            try:
                ipv6_opening_create(
                    device=data["device"],
                    protocol=data["protocol"],
                    ports=data["ports"],
                    description=data["description"],
                    actor=request.user,
                )
            except NetworkError as exc:
                _form_refused(request, form, exc)
            else:
                notice = gettext("Opening added.")
                if not htmx_partial(request):
                    messages.success(request, notice)
                return _openings_section(request, member, notice=notice)
        _form_errors_to_messages(request, form)
        return _openings_section(request, member, form=form)


class OpeningEditView(LoginRequiredMixin, View):
    """GET: the row as a form; POST: change the opening (device stays)."""

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        opening = _opening_or_404(request, pk)
        member = opening.device.member
        form = Ipv6OpeningForm(
            devices=_opening_devices(request, member),
            initial={
                "device": opening.device_id,
                "protocol": opening.protocol,
                "ports": opening.ports,
                "description": opening.description,
            },
        )
        return _openings_section(request, member, editing=opening.pk, edit_form=form)

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        opening = _opening_or_404(request, pk)
        member = opening.device.member
        post = request.POST.copy()
        post["device"] = str(opening.device_id)
        form = Ipv6OpeningForm(post, devices=_opening_devices(request, member))
        if form.is_valid():
            data = form.cleaned_data
            try:
                ipv6_opening_change(
                    opening=opening,
                    protocol=data["protocol"],
                    ports=data["ports"],
                    description=data["description"],
                    actor=request.user,
                )
            except NetworkError as exc:
                _form_refused(request, form, exc)
            else:
                return _openings_section(request, member, notice=gettext("Opening saved."))
        _form_errors_to_messages(request, form)
        return _openings_section(request, member, editing=opening.pk, edit_form=form)


class OpeningToggleView(LoginRequiredMixin, View):
    """POST: enable or disable the opening."""

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        opening = _opening_or_404(request, pk)
        member = opening.device.member
        enabled = request.POST.get("enabled") == "1"
        try:
            ipv6_opening_change(opening=opening, enabled=enabled, actor=request.user)
        except NetworkError as exc:
            if not htmx_partial(request):
                messages.error(request, exc.message)
            return _openings_section(request, member, notice=exc.message)
        notice = gettext("Opening enabled.") if enabled else gettext("Opening disabled.")
        return _openings_section(request, member, notice=notice)


class OpeningDeleteView(LoginRequiredMixin, View):
    """POST: close (delete) the opening."""

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        opening = _opening_or_404(request, pk)
        member = opening.device.member
        ipv6_opening_delete(opening=opening, actor=request.user)
        return _openings_section(request, member, notice=gettext("Opening deleted."))


class LiveStateView(LoginRequiredMixin, View):
    """One rule's live-state badge (the badge polls this while it is not live everywhere)."""

    def get(self, request: HttpRequest, kind: str, pk: int) -> HttpResponse:
        if kind == "forward":
            obj: PortForward | Ipv6Opening | Device = _forward_or_404(request, pk)
        elif kind == "opening":
            obj = _opening_or_404(request, pk)
        elif kind == "device":
            obj = _device_or_404(request, pk)
        else:
            raise Http404
        live_attach([obj])
        return render(
            request,
            "network/partials/live_state.html",
            {"obj": obj, "live": obj.live, "kind": kind},
        )


def _probe_answer(request: HttpRequest, run: Any, target: str) -> HttpResponse:
    """Run a probe and answer its result (or why it did not run) in place, always 200 so htmx
    swaps it."""

    try:
        results, error = run(), ""
    except ProbeRefused as exc:
        results, error = [], str(exc)
    return render(
        request,
        "network/partials/probe_result.html",
        {"results": results, "error": error, "target": target},
    )


class ForwardProbeView(LoginRequiredMixin, View):
    """POST: test the forward from outside (apps/network/probe.py)."""

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        forward = _forward_or_404(request, pk)
        run = lambda: forward_probe(actor=request.user, forward=forward)  # noqa: E731
        return _probe_answer(request, run, f"forward-{forward.pk}")


class OpeningProbeView(LoginRequiredMixin, View):
    """POST: test the IPv6 opening from outside (apps/network/probe.py)."""

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        opening = _opening_or_404(request, pk)
        run = lambda: opening_probe(actor=request.user, opening=opening)  # noqa: E731
        return _probe_answer(request, run, f"opening-{opening.pk}")
