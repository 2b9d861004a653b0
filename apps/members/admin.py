"""Admin for buildings and rooms (writes go through the services); the CSV import of buildings,
rooms and subnets is added by the network app's admin."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import transaction
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy

from apps.audit.selectors import audit_for_object
from apps.audit.services import audit_changes, audit_record
from apps.members import services
from apps.members.models import Building, Member, Room


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

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change:
            return super().save_model(request, obj, form, change)
        created = services.building_create(
            code=obj.code, name=obj.name, address=obj.address, actor=request.user
        )
        obj.pk = created.pk
        return None


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
