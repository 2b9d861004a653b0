"""The API routes of firewall (under /api/, included by portal/api_urls.py)."""

from django.urls import path

from apps.firewall.api import (
    FirewallHostListAPI,
    FirewallVersionListAPI,
    PushNowAPI,
    PushOutcomeAPI,
    RollbackAPI,
    StateResyncAPI,
    UnpinAPI,
)

urlpatterns = [
    path("firewalls/", FirewallHostListAPI.as_view(), name="api-firewalls"),
    path("firewalls/push-now/", PushNowAPI.as_view(), name="api-firewall-push-now"),
    path(
        "firewalls/push-now/<slug:request_id>/",
        PushOutcomeAPI.as_view(),
        name="api-firewall-push-outcome",
    ),
    path(
        "firewalls/<slug:name>/versions/",
        FirewallVersionListAPI.as_view(),
        name="api-firewall-versions",
    ),
    path("firewalls/<slug:name>/rollback/", RollbackAPI.as_view(), name="api-firewall-rollback"),
    path("firewalls/<slug:name>/unpin/", UnpinAPI.as_view(), name="api-firewall-unpin"),
    path("firewalls/<slug:name>/resync/", StateResyncAPI.as_view(), name="api-firewall-resync"),
]
