"""The API routes of notifications (under /api/, included by portal/api_urls.py)."""

from django.urls import path

from apps.notifications.api import NoticeDetailAPI, NoticeListAPI, PreferenceAPI

urlpatterns = [
    path("notices/", NoticeListAPI.as_view(), name="api-notices"),
    path("notices/preferences/", PreferenceAPI.as_view(), name="api-notice-preferences"),
    path("notices/<int:pk>/", NoticeDetailAPI.as_view(), name="api-notice"),
]
