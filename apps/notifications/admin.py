"""Read-only admin views: notices are made by services, preferences by their member."""

from __future__ import annotations

from django.contrib import admin

from apps.network.admin import ReadOnlyAdmin
from apps.notifications.models import Notice, Preference


@admin.register(Notice)
class NoticeAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "member", "kind", "mail_status", "mailed_at"]
    list_filter = ["kind", "mail_status"]
    search_fields = ["member__user__username", "member__user__last_name", "source"]
    raw_id_fields = ["member"]


@admin.register(Preference)
class PreferenceAdmin(ReadOnlyAdmin):
    list_display = ["member", "language", "updated_at"]
    raw_id_fields = ["member"]
