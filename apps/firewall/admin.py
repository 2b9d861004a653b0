"""Django admin for firewall hosts (read-mostly: pushes go through services).

Edits of sites and hosts are audited like the pages' changes; rule-set versions and the push log
are records of what happened, so nobody adds, changes or deletes them here."""

from django import forms
from django.contrib import admin
from django.utils.translation import gettext as _

from apps.audit.admin import AuditedModelAdmin, ReadOnlyAdmin
from apps.firewall.models import FirewallHost, PushLogEntry, RuleSetVersion, Site
from apps.network.hooks import network_changed_on_commit


class SiteForm(forms.ModelForm):
    """A building is served by one site at most (else two sites would both NAT its members)."""

    class Meta:
        model = Site
        fields = ["name", "buildings", "fast_path"]

    def clean_buildings(self):
        buildings = self.cleaned_data["buildings"]
        taken = (
            Site.buildings.through.objects.filter(building__in=buildings)
            .exclude(site_id=self.instance.pk)
            .select_related("building", "site")
            .first()
        )
        if taken:
            raise forms.ValidationError(
                _("%(building)s is already served by site %(site)s.")
                % {"building": taken.building, "site": taken.site}
            )
        return buildings


@admin.register(Site)
class SiteAdmin(AuditedModelAdmin):
    form = SiteForm
    list_display = ["name", "status", "status_at", "fast_path"]
    filter_horizontal = ["buildings"]
    readonly_fields = ["status", "status_reason", "status_at"]

    def save_related(self, request, form, formsets, change):
        """Buildings or the fast path changed: compile and push (after the commit)."""
        super().save_related(request, form, formsets, change)

        network_changed_on_commit(cause=f"site {form.instance.name} settings", actor=request.user)


@admin.register(FirewallHost)
class FirewallHostAdmin(AuditedModelAdmin):
    list_display = [
        "name",
        "site",
        "address",
        "rollout_order",
        "enabled",
        "push_status",
        "applied_at",
        "pinned_version",
        "pinned_by",
        "pinned_at",
        "confirmed_digest",
        "drift",
        "digest_checked_at",
    ]
    list_filter = ["site"]

    def save_related(self, request, form, formsets, change):
        """Interfaces, site or order changed: compile and push (after the commit)."""
        super().save_related(request, form, formsets, change)

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
class RuleSetVersionAdmin(ReadOnlyAdmin):
    list_display = ["id", "host", "content_hash", "size_bytes", "cause", "created_at"]
    list_filter = ["host"]


@admin.register(PushLogEntry)
class PushLogEntryAdmin(ReadOnlyAdmin):
    list_display = ["at", "host", "step", "ok", "seconds", "message"]
    list_filter = ["host", "step", "ok"]
