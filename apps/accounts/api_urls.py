"""The API routes of accounts (under /api/, included by portal/api_urls.py)."""

from django.urls import path

from apps.accounts.api import MeAPI

urlpatterns = [
    path("me/", MeAPI.as_view(), name="api-me"),
]
