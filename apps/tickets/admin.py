"""Admin: queues and canned responses are edited here (audited); tickets and mail are read-only."""

from django.contrib import admin

from apps.audit.admin import AuditedModelAdmin
from apps.tickets.models import CannedResponse, InboundMail, Incident, Queue, Ticket


@admin.register(Queue)
class QueueAdmin(AuditedModelAdmin):
    list_display = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(CannedResponse)
class CannedResponseAdmin(AuditedModelAdmin):
    list_display = ["title", "queue"]
    search_fields = ["title", "body", "body_de"]


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Ticket)
class TicketAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "subject",
        "requester_email",
        "status",
        "assignee",
        "incident",
        "created_at",
    ]
    list_filter = ["status", "queue"]
    search_fields = ["subject", "requester_email"]


@admin.register(Incident)
class IncidentAdmin(ReadOnlyAdmin):
    list_display = ["title", "severity", "started_at", "ended_at", "public"]


@admin.register(InboundMail)
class InboundMailAdmin(ReadOnlyAdmin):
    list_display = ["id", "received_at", "envelope_from", "status", "size"]
    list_filter = ["status", "source"]
    exclude = ["raw"]
