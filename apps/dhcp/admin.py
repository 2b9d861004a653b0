from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from apps.dhcp.models import DhcpSettings, Lease, RegistrationRange
from apps.network.admin import PolicyAdmin


@admin.register(DhcpSettings)
class DhcpSettingsAdmin(PolicyAdmin):
    """Audited; every save reaches Kea and the walled garden with the next push."""

    list_display = ["__str__", "lease_seconds", "registration_lease_seconds", "dns_servers"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not DhcpSettings.objects.exists()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(RegistrationRange)
class RegistrationRangeAdmin(PolicyAdmin):
    list_display = ["building", "network", "enabled"]
    list_filter = ["enabled"]


@admin.register(Lease)
class LeaseAdmin(admin.ModelAdmin):
    """Read from the hosts; never edited by hand."""

    list_display = ["address", "mac", "host_name", "starts", "ends", "registration"]
    search_fields = ["mac", "address", "hostname"]
    list_filter = ["host_name", "registration"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
