"""Admin for subnets, pools, addresses, devices and the network settings."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from apps.members.admin import AuditedAdmin, audit_trail
from apps.network.errors import NetworkError
from apps.network.models import Device, NetworkSettings, PublicAddress, PublicPool, Subnet
from apps.network.services import subnet_create


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
            from apps.audit.services import audit_record

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


@admin.register(NetworkSettings)
class NetworkSettingsAdmin(AuditedAdmin):
    list_display = ["__str__", "device_limit", "quarantine_days"]
    readonly_fields = [audit_trail]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not NetworkSettings.objects.exists()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
