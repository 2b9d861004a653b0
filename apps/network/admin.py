"""Admin for subnets (and the CSV import of buildings, rooms and subnets), pools, addresses, devices, the network settings and policy (blocked
ports, management networks), shaping profiles; forwards and openings read-only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy as _lazy

from apps.audit.services import audit_record
from apps.members.admin import AuditedAdmin, BuildingAdmin, audit_trail
from apps.members.models import Building
from apps.network.errors import NetworkError
from apps.network.forms import CsvImportForm
from apps.network.models import (
    BlockedPort,
    Device,
    Ipv6Opening,
    ManagementNetwork,
    NetworkSettings,
    PortForward,
    PublicAddress,
    PublicPool,
    ShapingProfile,
    Subnet,
)
from apps.network.ports import PortRange, PortRangeError
from apps.network.roomimport import import_summary, rooms_import
from apps.network.services import policy_object_delete, policy_object_save, subnet_create

# Buildings are the members app's; their CSV import writes subnets too, so it is added here.
admin.site.unregister(Building)


@admin.register(Building)
class BuildingImportAdmin(BuildingAdmin):
    """Buildings, with the CSV import of buildings, rooms and their subnets."""

    change_list_template = "admin/members/building/change_list.html"

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


class SubnetForm(forms.ModelForm):
    class Meta:
        model = Subnet
        fields = ["building", "network"]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        # Validate through the service in a transaction that is rolled back; save_model reruns it.
        from django.db import transaction

        if self.errors or self.instance.pk:
            return data
        try:
            with transaction.atomic():
                subnet_create(building=data["building"], network=str(data["network"]), actor=None)
                transaction.set_rollback(True)
        except (NetworkError, ValueError) as exc:
            raise ValidationError({"network": str(exc)}) from None
        return data


@admin.register(Subnet)
class SubnetAdmin(admin.ModelAdmin):
    form = SubnetForm
    list_display = ["network", "building", "family"]
    list_filter = ["family", "building"]
    readonly_fields = ["family", audit_trail]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is not None:
            return ["building", "network", *self.readonly_fields]
        return self.readonly_fields

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change:
            return
        created = subnet_create(building=obj.building, network=str(obj.network), actor=request.user)
        obj.pk = created.pk


@admin.register(PublicPool)
class PublicPoolAdmin(AuditedAdmin):
    list_display = ["name", "network", "active"]
    readonly_fields = [audit_trail]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if not change:
            audit_record(
                actor=request.user,
                action="publicpool.create",
                obj=obj,
                changes={"network": [None, str(obj.network)]},
            )


@admin.register(PublicAddress)
class PublicAddressAdmin(admin.ModelAdmin):
    """Read-only: addresses are assigned at check-in and quarantined when a membership ends."""

    list_display = ["address", "pool", "member", "assigned_at", "quarantined_until"]
    list_filter = ["pool"]
    search_fields = ["address"]
    list_select_related = ["pool", "member__user"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Device)
class DeviceAdmin(PublicAddressAdmin):
    list_display = ["name", "mac", "ipv4", "ipv6", "member"]
    list_filter = []
    search_fields = ["name"]
    list_select_related = ["member__user"]


class PolicyAdmin(admin.ModelAdmin):
    """Policy rows: every save and delete goes through the service (audited; recompiles)."""

    readonly_fields = [audit_trail]

    def _fields(self) -> list[str]:
        return [f.name for f in self.model._meta.concrete_fields if f.name != "id"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        policy_object_save(obj=obj, actor=request.user, fields=self._fields())

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        policy_object_delete(obj=obj, actor=request.user, fields=self._fields())

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for obj in queryset:
            self.delete_model(request, obj)


class BlockedPortForm(forms.ModelForm):
    class Meta:
        model = BlockedPort
        fields = ["direction", "protocol", "first", "last", "note"]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        first, last = data.get("first"), data.get("last")
        if first is not None and last is not None:
            try:
                PortRange(first, last)
            except PortRangeError as exc:
                raise ValidationError({"last": str(exc)}) from None
        return data


@admin.register(BlockedPort)
class BlockedPortAdmin(PolicyAdmin):
    form = BlockedPortForm
    list_display = ["direction", "protocol", "ports", "note"]
    list_filter = ["direction", "protocol"]


@admin.register(ManagementNetwork)
class ManagementNetworkAdmin(PolicyAdmin):
    list_display = ["network", "note"]


@admin.register(ShapingProfile)
class ShapingProfileAdmin(PolicyAdmin):
    list_display = ["name", "down_kbit", "up_kbit", "is_default", "in_use"]

    @admin.display(description=_lazy("test accesses"))
    def in_use(self, obj: ShapingProfile) -> int:
        return obj.test_accesses.count()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.test_accesses.exists():
            return False  # PROTECT: move its test accesses to another profile first
        return super().has_delete_permission(request, obj)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Read-only: written by residents and volunteers on the member pages (services, audit)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(PortForward)
class PortForwardAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "member", "device", "public_address", "enabled", "description"]
    list_filter = ["protocol", "enabled"]
    list_select_related = ["member__user", "device", "public_address"]
    search_fields = ["description", "device__name", "member__user__last_name"]


@admin.register(Ipv6Opening)
class Ipv6OpeningAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "device", "enabled", "description"]
    list_filter = ["protocol", "enabled"]
    list_select_related = ["device"]


@admin.register(NetworkSettings)
class NetworkSettingsAdmin(PolicyAdmin):
    list_display = [
        "__str__",
        "device_limit",
        "port_forward_limit",
        "ipv6_opening_limit",
        "quarantine_days",
        "test_access_notice_days",
        "conntrack_quota_devices",
        "conntrack_quota_forwards",
        "syn_proxy",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not NetworkSettings.objects.exists()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
