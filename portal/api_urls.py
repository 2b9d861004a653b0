"""All API routes under /api/: each app's own (apps/<app>/api_urls.py), then the schema."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

urlpatterns = [
    path("", include("apps.accounts.api_urls")),
    path("", include("apps.health.api_urls")),
    path("", include("apps.members.api_urls")),
    path("", include("apps.network.api_urls")),
    path("", include("apps.testaccess.api_urls")),
    path("", include("apps.tickets.api_urls")),
    path("", include("apps.firewall.api_urls")),
    path("", include("apps.abuse.api_urls")),
    path("", include("apps.notifications.api_urls")),
    path("", include("apps.traffic.api_urls")),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves its start-up script as a file (?script), so the page needs no
    # inline code under the Content-Security-Policy.
    path(
        "docs/",
        SpectacularSwaggerSplitView.as_view(
            url_name="api-schema", template_name="api/swagger_ui.html"
        ),
        name="api-docs",
    ),
]
