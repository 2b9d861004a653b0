"""Django admin for firewall hosts (read-mostly: pushes go through services)."""

from django.contrib import admin

from apps.firewall.models import FirewallHost, PushLogEntry, RuleSetVersion


@admin.register(FirewallHost)
class FirewallHostAdmin(admin.ModelAdmin):
    list_display = ["name", "address", "rollout_order", "enabled", "push_status", "applied_at"]
    filter_horizontal = ["buildings"]

    def save_related(self, request, form, formsets, change):
        """Interfaces, site or order changed: compile and push (after the commit)."""
        super().save_related(request, form, formsets, change)
        from apps.network.hooks import network_changed_on_commit

        network_changed_on_commit(
            cause=f"firewall host {form.instance.name} settings", actor=request.user
        )

    readonly_fields = [
        "push_status",
        "applied_version",
        "applied_checksum",
        "error_reason",
        "last_push_at",
        "applied_at",
    ]


@admin.register(RuleSetVersion)
class RuleSetVersionAdmin(admin.ModelAdmin):
    list_display = ["id", "host", "content_hash", "size_bytes", "cause", "created_at"]
    list_filter = ["host"]
    readonly_fields = [f.name for f in RuleSetVersion._meta.fields]

    def has_add_permission(self, request):
        return False


@admin.register(PushLogEntry)
class PushLogEntryAdmin(admin.ModelAdmin):
    list_display = ["at", "host", "step", "ok", "seconds", "message"]
    list_filter = ["host", "step", "ok"]
    readonly_fields = [f.name for f in PushLogEntry._meta.fields]
