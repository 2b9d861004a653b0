"""The API routes of testaccess (under /api/, included by portal/api_urls.py)."""

from django.urls import path

from apps.testaccess.api import TestAccessDetailAPI, TestAccessListAPI

urlpatterns = [
    path("test-accesses/", TestAccessListAPI.as_view(), name="api-test-accesses"),
    path("test-accesses/<int:pk>/", TestAccessDetailAPI.as_view(), name="api-test-access"),
]
