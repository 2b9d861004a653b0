"""Second-factor locks: visible, and ended early by deleting the row."""

from django.contrib import admin
from django.http import HttpRequest

from apps.accounts import admin_otp
from apps.accounts.models import SecondFactorAttempts

admin_otp.register(admin.site)  # django-otp's device admins with translated labels


@admin.register(SecondFactorAttempts)
class SecondFactorAttemptsAdmin(admin.ModelAdmin):
    list_display = ("user", "failures", "locked_until")
    search_fields = ("user__username",)
    readonly_fields = ("user", "failures", "locked_until")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
