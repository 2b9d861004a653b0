"""All API routes under /api/."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from apps.accounts.api import MeAPI
from apps.health.api import SystemStatusAPI

urlpatterns = [
    path("me/", MeAPI.as_view(), name="api-me"),
    path("system/status/", SystemStatusAPI.as_view(), name="api-system-status"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]
