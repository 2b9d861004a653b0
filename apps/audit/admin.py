from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from apps.audit.models import AuditEntry


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records nobody edits by hand: listed and shown, never added, changed or deleted."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """The whole trail, read-only."""

    list_display = ["at", "actor_name", "action", "object_repr"]
    list_filter = ["action"]
    search_fields = ["object_repr", "actor_name", "action"]
    date_hierarchy = "at"
