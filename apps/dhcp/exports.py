"""The CSV download of DHCP leases from the office-hours page, with its search applied (the
shared helpers: apps/members/exports.py)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from django.utils.translation import gettext as _
from django.views import View

from apps.accounts.roles import StaffRequiredMixin
from apps.core.csvexport import csv_response
from apps.core.mac import mac_parse
from apps.dhcp.models import Lease
from apps.members.exports import (
    CHUNK,
    export_audit,
    export_filter,
    export_stamp,
    matching_member_ids,
    person_name,
)
from apps.members.selectors import search_kind
from apps.network.models import Device


class LeaseExportView(StaffRequiredMixin, View):
    """The lease history of the MAC or IPv4 address searched for, of the devices of the members
    the search finds, or all of it (the table is bounded by its retention)."""

    def get(self, request: HttpRequest) -> HttpResponseBase:
        query = request.GET.get("q", "").strip()
        export_audit(
            request=request, action="export.leases", filters=export_filter(request.GET, ["q"])
        )
        leases = Lease.objects.order_by("-starts", "-id")
        kind = search_kind(query) if query else ""
        if kind == "mac":
            leases = leases.filter(mac=mac_parse(query))
        elif kind == "ipv4":
            leases = leases.filter(address=str(ipaddress.IPv4Address(query)))
        elif query:
            macs = Device.objects.filter(
                member_id__in=matching_member_ids(request.user, query)
            ).values("mac")
            leases = leases.filter(mac__in=macs)
        header = [
            _("Address"), _("MAC address"), _("Host"), _("Since"), _("Until"),
            _("Registration range"), _("Device"), _("Member"),
        ]  # fmt: skip
        columns = leases.values_list(
            "address", "mac", "host_name", "starts", "ends", "registration"
        )
        yes, no = _("yes"), _("no")

        def owners(macs: set[str]) -> dict[str, tuple[str, str]]:
            found = Device.objects.filter(mac__in=macs).values_list(
                "mac", "name", "member__user__first_name", "member__user__last_name",
                "member__user__username",
            )  # fmt: skip
            return {str(mac): (name, person_name(*who)) for mac, name, *who in found}

        def rows() -> Iterator[list[Any]]:
            for chunk in _chunks(columns.iterator(CHUNK)):
                devices = owners({str(row[1]) for row in chunk})
                for address, mac, host, starts, ends, registration in chunk:
                    device, owner = devices.get(str(mac), (None, None))
                    flag = yes if registration else no
                    yield [address, mac, host, starts, ends, flag, device, owner]

        return csv_response(
            filename=f"dhcp-leases-{export_stamp()}.csv", header=header, rows=rows()
        )


def _chunks(items: Iterator[Any]) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
