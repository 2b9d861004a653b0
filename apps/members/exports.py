"""CSV downloads of the office-hours tables (members, devices, DHCP leases) with the page's
search applied: staff roles only, every download written to the audit trail with its filter."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator
from typing import Any

from django.db import transaction
from django.http import HttpRequest, HttpResponseBase, QueryDict
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views import View

from apps.accounts.roles import StaffRequiredMixin
from apps.audit.services import audit_record
from apps.core.csvexport import csv_response
from apps.dhcp.models import Lease
from apps.members.choices import MemberStatus
from apps.members.models import Member
from apps.members.selectors import member_search, search_kind
from apps.network.mac import mac_parse
from apps.network.models import Device

# A search narrows the export to its matches, however many (the page shows the first few).
EXPORT_SEARCH_LIMIT = 100_000
CHUNK = 2000


def export_filter(query: QueryDict, names: Iterable[str]) -> str:
    """The filters a download used, as the query string that reproduces it ("" for none)."""
    used = QueryDict(mutable=True)
    for name in names:
        value = query.get(name, "").strip()
        if value:
            used[name] = value
    return used.urlencode()


def export_audit(*, request: HttpRequest, action: str, filters: str) -> None:
    """One audit row per download: who, which table, with which filter."""
    with transaction.atomic():
        audit_record(
            actor=request.user,
            action=action,
            obj=request.user,
            changes={"filter": [None, filters]} if filters else {},
        )


def export_stamp() -> str:
    return timezone.localtime().strftime("%Y-%m-%d-%H%M")


def _matching_member_ids(actor: Any, query: str) -> list[int]:
    return [m.pk for m in member_search(actor=actor, query=query, limit=EXPORT_SEARCH_LIMIT)]


def _person(first: str, last: str, login: str) -> str:
    return f"{first} {last}".strip() or login


# The rows are read as plain values, not model instances: building 60,000 devices with their
# member, login and room as objects took two thirds of the download's time.


class MemberExportView(StaffRequiredMixin, View):
    """The members the office-hours search finds (every member without a search)."""

    def get(self, request: HttpRequest) -> HttpResponseBase:
        query = request.GET.get("q", "").strip()
        export_audit(
            request=request, action="export.members", filters=export_filter(request.GET, ["q"])
        )
        members = Member.objects.visible_to(request.user).order_by("pk")
        if query:
            members = members.filter(pk__in=_matching_member_ids(request.user, query))
        header = [
            _("Name"), _("Login"), _("E-mail"), _("Room"), _("Status"), _("Public IPv4"),
            _("Registered"), _("Checked in"), _("Test access until"), _("Ended"),
        ]  # fmt: skip
        columns = members.values_list(
            "user__first_name", "user__last_name", "user__username", "user__email",
            "room__label", "status", "public_ipv4__address", "registered_at", "checked_in_at",
            "test_access_until", "ended_at",
        )  # fmt: skip
        statuses = dict(MemberStatus.choices)

        def rows() -> Iterator[list[Any]]:
            for first, last, login, email, room, status, *rest in columns.iterator(CHUNK):
                label = statuses.get(status, status)
                yield [_person(first, last, login), login, email, room, label, *rest]

        return csv_response(filename=f"members-{export_stamp()}.csv", header=header, rows=rows())


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
            devices = devices.filter(member_id__in=_matching_member_ids(request.user, query))
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
                yield [_person(first, last, login), *rest]

        return csv_response(filename=f"devices-{export_stamp()}.csv", header=header, rows=rows())


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
                member_id__in=_matching_member_ids(request.user, query)
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
            return {str(mac): (name, _person(*who)) for mac, name, *who in found}

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
