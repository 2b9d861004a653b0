"""Admin for test accesses: read-only (they change at office hours, through the services)."""

from django.contrib import admin

from apps.network.admin import ReadOnlyAdmin
from apps.testaccess.models import TestAccess


@admin.register(TestAccess)
class TestAccessAdmin(ReadOnlyAdmin):
    list_display = ["member", "profile", "granted_at", "notice_sent_for"]
    list_select_related = ["member__user", "profile"]
