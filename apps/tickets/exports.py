"""The inbox as a CSV download, with the inbox's filters and search applied (support roles only,
each download in the audit trail with its filter)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from django.utils.translation import gettext as _
from django.views import View

from apps.core.csvexport import csv_response
from apps.members.exports import CHUNK, export_audit, export_filter, export_stamp
from apps.tickets import selectors
from apps.tickets.choices import TicketStatus
from apps.tickets.views import SupportRequiredMixin

# The inbox's own filters (apps.tickets.selectors.ticket_list).
FILTERS = ["q", "status", "queue", "assignee", "incident", "tag"]


class TicketExportView(SupportRequiredMixin, View):
    """Every ticket the inbox shows with these filters, not only the page on screen."""

    def get(self, request: HttpRequest) -> HttpResponseBase:
        filters = request.GET.copy()
        if "status" not in filters:
            filters["status"] = "active"  # as the inbox
        export_audit(
            request=request, action="export.tickets", filters=export_filter(filters, FILTERS)
        )
        tickets = selectors.ticket_list(actor=request.user, filters=filters)
        header = [
            _("No."), _("Subject"), _("Requester"), _("E-mail"), _("Status"), _("Queue"),
            _("Assignee"), _("Incident"), _("Tags"), _("Opened"), _("Last message"), _("Solved"),
        ]  # fmt: skip
        # Plain values, not model instances (as the office-hours downloads).
        columns = tickets.values_list(
            "pk", "subject", "requester__first_name", "requester__last_name", "requester_name",
            "requester_email", "requester__email", "status", "queue__name",
            "assignee__username", "incident_id", "incident__title", "tags", "created_at",
            "last_message_at", "solved_at",
        )  # fmt: skip
        statuses = dict(TicketStatus.choices)

        def rows() -> Iterator[list[Any]]:
            for (pk, subject, first, last, name, email, login_email, status, queue, assignee,
                 incident, title, *rest) in columns.iterator(CHUNK):  # fmt: skip
                requester = f"{first or ''} {last or ''}".strip() or name or email
                yield [
                    pk, subject, requester, email or login_email, statuses.get(status, status),
                    queue, assignee, f"#{incident} {title}" if incident else None, *rest,
                ]  # fmt: skip

        return csv_response(filename=f"tickets-{export_stamp()}.csv", header=header, rows=rows())
