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
        tickets = selectors.ticket_list(actor=request.user, filters=filters).select_related(
            "requester"
        )
        header = [
            _("No."), _("Subject"), _("Requester"), _("E-mail"), _("Status"), _("Queue"),
            _("Assignee"), _("Incident"), _("Tags"), _("Opened"), _("Last message"), _("Solved"),
        ]  # fmt: skip

        def rows() -> Iterator[list[Any]]:
            for t in tickets.iterator(chunk_size=CHUNK):
                yield [
                    t.pk, t.subject, t.requester_display,
                    t.requester_email or (t.requester.email if t.requester_id else ""),
                    t.get_status_display(), t.queue.name if t.queue_id else None,
                    t.assignee.get_username() if t.assignee_id else None,
                    f"#{t.incident_id} {t.incident.title}" if t.incident_id else None,
                    t.tags, t.created_at, t.last_message_at, t.solved_at,
                ]  # fmt: skip

        return csv_response(filename=f"tickets-{export_stamp()}.csv", header=header, rows=rows())
