"""The URL root: each app's routes (apps/<app>/urls.py), the API (portal/api_urls.py), admin."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("i18n/", include("django.conf.urls.i18n")),
    path("admin/", admin.site.urls),
    # Before Django's own: the reset form with its rate limits.
    path("", include("apps.accounts.reset_urls")),
    path("accounts/", include("apps.accounts.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/", include("portal.api_urls")),
    path("", include("apps.operations.urls")),
    path("", include("apps.dhcp.urls")),
    path("", include("apps.members.urls")),
    path("", include("apps.network.urls")),
    path("", include("apps.testaccess.urls")),
    path("", include("apps.health.urls")),
    path("", include("apps.firewall.urls")),
    path("", include("apps.tickets.urls")),
    path("", include("apps.abuse.urls")),
    path("", include("apps.notifications.urls")),
    path("", include("apps.traffic.urls")),
    path("", include("apps.alerts.urls")),
]
