"""The CSV download of devices from the office-hours page, with its search applied (the members'
own download and the shared helpers: apps/members/exports.py; the leases: apps/dhcp/exports.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from django.utils.translation import gettext as _
from django.views import View

from apps.accounts.roles import StaffRequiredMixin
from apps.core.csvexport import csv_response
from apps.members.exports import (
    CHUNK,
    export_audit,
    export_filter,
    export_stamp,
    matching_member_ids,
    person_name,
)
from apps.members.models import Member
from apps.network.models import Device


class DeviceExportView(StaffRequiredMixin, View):
    """The devices of the members the search finds, or of one member (`member`), or all."""

    def get(self, request: HttpRequest) -> HttpResponseBase:
        query = request.GET.get("q", "").strip()
        member = request.GET.get("member", "").strip()
        export_audit(
            request=request,
            action="export.devices",
            filters=export_filter(request.GET, ["q", "member"]),
        )
        devices = Device.objects.filter(
            member__in=Member.objects.visible_to(request.user)
        ).order_by("member_id", "name", "pk")
        if member.isdigit():
            devices = devices.filter(member_id=int(member))
        elif member:
            devices = devices.none()
        if query:
            devices = devices.filter(member_id__in=matching_member_ids(request.user, query))
        header = [
            _("Member"), _("Room"), _("Device"), _("MAC address"), _("IPv4 address"),
            _("IPv6 address"), _("Added"),
        ]  # fmt: skip
        columns = devices.values_list(
            "member__user__first_name", "member__user__last_name", "member__user__username",
            "member__room__label", "name", "mac", "ipv4", "ipv6", "created_at",
        )  # fmt: skip

        def rows() -> Iterator[list[Any]]:
            for first, last, login, *rest in columns.iterator(CHUNK):
                yield [person_name(first, last, login), *rest]

        return csv_response(filename=f"devices-{export_stamp()}.csv", header=header, rows=rows())
