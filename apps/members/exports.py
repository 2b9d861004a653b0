"""CSV downloads of the office-hours tables with the page's search applied: staff roles only,
every download written to the audit trail with its filter. The members here; devices and
DHCP leases in the network app's exports, tickets in apps/tickets/exports.py."""

from __future__ import annotations

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
from apps.members.choices import MemberStatus
from apps.members.models import Member
from apps.members.selectors import member_search

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


def matching_member_ids(actor: Any, query: str) -> list[int]:
    return [m.pk for m in member_search(actor=actor, query=query, limit=EXPORT_SEARCH_LIMIT)]


def person_name(first: str, last: str, login: str) -> str:
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
            members = members.filter(pk__in=matching_member_ids(request.user, query))
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
                yield [person_name(first, last, login), login, email, room, label, *rest]

        return csv_response(filename=f"members-{export_stamp()}.csv", header=header, rows=rows())
