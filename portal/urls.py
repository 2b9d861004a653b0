"""URL configuration."""

from django.contrib import admin
from django.urls import include, path

from apps.accounts.password_reset import PasswordResetView

urlpatterns = [
    path("i18n/", include("django.conf.urls.i18n")),
    path("admin/", admin.site.urls),
    # Before Django's own: the reset form with its rate limits.
    path("accounts/password_reset/", PasswordResetView.as_view(), name="password_reset"),
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
]
