"""The API routes of abuse (under /api/, included by portal/api_urls.py)."""

from django.urls import path

from apps.abuse.api import AbuseLookupAPI

urlpatterns = [
    path("abuse/lookups/", AbuseLookupAPI.as_view(), name="api-abuse-lookup"),
]
