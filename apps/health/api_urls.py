"""The API routes of health (under /api/, included by portal/api_urls.py)."""

from django.urls import path

from apps.health.api import SystemStatusAPI

urlpatterns = [
    path("system/status/", SystemStatusAPI.as_view(), name="api-system-status"),
]
