"""Oversight of the lookups (who asked what, and why). The holdings themselves are not in the
admin on purpose: every look into them goes through the audited lookup with a reason."""

from django.contrib import admin

from apps.abuse.models import AbuseLookup
from apps.audit.admin import ReadOnlyAdmin


@admin.register(AbuseLookup)
class AbuseLookupAdmin(ReadOnlyAdmin):
    """Read-only: the record of every lookup."""

    list_display = ["asked_at", "actor_name", "address", "at", "verdict", "reason"]
    list_filter = ["verdict"]
    search_fields = ["address", "actor_name", "reason"]
    fields = ["asked_at", "actor_name", "address", "at", "verdict", "reason"]
    readonly_fields = fields
