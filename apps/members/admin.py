"""Admin for buildings and rooms (writes go through the services), with the CSV import."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import path
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from apps.audit.selectors import audit_for_object
from apps.audit.services import audit_changes, audit_record
from apps.members import services
from apps.members.models import Building, Member, Room
from apps.members.roomimport import rooms_import
from apps.network.errors import NetworkError
from apps.network.forms import CsvImportForm


def audit_trail(obj: Any) -> SafeString:
    """The object's audit trail as a small table (read-only admin field)."""
    if obj is None or obj.pk is None:
        return SafeString("—")
    entries = audit_for_object(obj=obj)[:25]
    return SafeString(render_to_string("audit/partials/trail.html", {"audit": entries}))


audit_trail.short_description = gettext_lazy("Audit trail")  # type: ignore[attr-defined]


class AuditedAdmin(admin.ModelAdmin):
    """Changes made in the admin are audited like any other change."""

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change:
            before = {f: form.initial.get(f) for f in form.changed_data}
            super().save_model(request, obj, form, change)
            after = {f: form.cleaned_data.get(f) for f in form.changed_data}
            audit_record(
                actor=request.user,
                action=f"{obj._meta.model_name}.change",
                obj=obj,
                changes=audit_changes(before, after),
            )
        else:
            super().save_model(request, obj, form, change)


@admin.register(Building)
class BuildingAdmin(AuditedAdmin):
    list_display = ["code", "name", "address"]
    search_fields = ["code", "name"]
    readonly_fields = [audit_trail]
    change_list_template = "admin/members/building/change_list.html"

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change:
            return super().save_model(request, obj, form, change)
        created = services.building_create(
            code=obj.code, name=obj.name, address=obj.address, actor=request.user
        )
        obj.pk = created.pk
        return None

    def get_urls(self) -> list[Any]:
        return [
            path(
                "import-csv/",
                self.admin_site.admin_view(self.import_csv),
                name="members_building_import_csv",
            ),
            *super().get_urls(),
        ]

    def import_csv(self, request: HttpRequest) -> HttpResponse:
        """Upload a CSV of buildings and rooms (all or nothing)."""
        form = CsvImportForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            try:
                counts = rooms_import(data=form.cleaned_data["file"].read(), actor=request.user)
            except NetworkError as exc:
                form.add_error("file", exc.message)
            else:
                messages.success(request, import_summary(counts))
                return redirect("admin:members_building_changelist")
        context = {
            **self.admin_site.each_context(request),
            "form": form,
            "title": _("Import buildings and rooms"),
        }
        return render(request, "admin/members/building/import_csv.html", context)


def import_summary(counts: dict[str, int]) -> str:
    return (
        _(
            "Imported: %(buildings)d buildings, %(rooms)d rooms, %(subnets)d subnets; "
            "%(unchanged)d rooms existed already."
        )
        % counts
    )


@admin.register(Room)
class RoomAdmin(admin.ModelAdmin):
    list_display = ["label", "building", "number", "ipv6_prefix"]
    list_filter = ["building"]
    search_fields = ["label", "number"]
    list_select_related = ["building"]
    readonly_fields = ["label", "ipv6_prefix", audit_trail]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is not None:
            return ["building", "number", *self.readonly_fields]
        return self.readonly_fields

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change:
            return
        with transaction.atomic():
            created = services.room_create(
                building=obj.building, number=obj.number, actor=request.user
            )
        obj.pk = created.pk


@admin.register(Member)
class MemberAdmin(admin.ModelAdmin):
    """Read-only: memberships change through the office-hours page (services, audit)."""

    list_display = ["__str__", "status", "room", "registered_at"]
    list_filter = ["status"]
    search_fields = ["user__last_name", "user__email", "room__label"]
    list_select_related = ["user", "room"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
